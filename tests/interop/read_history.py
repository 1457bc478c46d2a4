"""Reads a gpuledger history table with DuckDB and with pyarrow, as any
Parquet engine would: Hive partitioning gives the `date` column.

    read_history.py ROOT TABLE

Prints a JSON object: row counts by each engine, the distinct dates, and
the number of distinct (source, seq) pairs DuckDB sees.
"""

import json
import sys

import duckdb
import pyarrow.dataset as ds


def main(root: str, table: str) -> int:
    pattern = f"{root}/{table}/*/*.parquet"
    con = duckdb.connect()
    rows, ids, dates = con.execute(
        f"""SELECT count(*), count(DISTINCT (source, seq)), list(DISTINCT CAST(date AS VARCHAR))
            FROM read_parquet('{pattern}', hive_partitioning = true)"""
    ).fetchone()
    dataset = ds.dataset(f"{root}/{table}", format="parquet", partitioning="hive", exclude_invalid_files=True)
    arrow_table = dataset.to_table()
    print(json.dumps({
        "duckdb_rows": rows,
        "duckdb_ids": ids,
        "dates": sorted(dates),
        "pyarrow_rows": arrow_table.num_rows,
        "pyarrow_has_date": "date" in arrow_table.column_names,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
