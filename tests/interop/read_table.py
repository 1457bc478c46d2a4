"""Reads any gpuledger history table with DuckDB and with pyarrow, as any
Parquet engine would: Hive partitioning gives the typed `date` column.

    read_table.py ROOT TABLE

Prints a JSON object: rows by each engine, the distinct dates (sorted), and
whether pyarrow sees the `date` column.
"""

import json
import sys

import duckdb
import pyarrow.dataset as ds


def read(root: str, table: str) -> dict:
    """Rows by DuckDB and pyarrow, the distinct dates, and whether pyarrow
    sees the `date` column."""
    pattern = f"{root}/{table}/*/*.parquet"
    rows, dates = duckdb.connect().execute(
        f"""SELECT count(*), list(DISTINCT CAST(date AS VARCHAR))
            FROM read_parquet('{pattern}', hive_partitioning = true)"""
    ).fetchone()
    dataset = ds.dataset(f"{root}/{table}", format="parquet", partitioning="hive", exclude_invalid_files=True)
    arrow_table = dataset.to_table()
    return {
        "duckdb_rows": rows,
        "dates": sorted(dates),
        "pyarrow_rows": arrow_table.num_rows,
        "pyarrow_has_date": "date" in arrow_table.column_names,
    }


def main(root: str, table: str) -> int:
    print(json.dumps(read(root, table)))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
