"""Reads the `samples` history table with DuckDB and with pyarrow, as any
Parquet engine would (see read_table.py), and counts the distinct sample
ids (source, seq) DuckDB sees.

    read_history.py ROOT TABLE

Prints read_table.py's JSON object plus `duckdb_ids`.
"""

import json
import sys

import duckdb

from read_table import read


def main(root: str, table: str) -> int:
    result = read(root, table)
    (result["duckdb_ids"],) = duckdb.connect().execute(
        f"""SELECT count(DISTINCT (source, seq))
            FROM read_parquet('{root}/{table}/*/*.parquet', hive_partitioning = true)"""
    ).fetchone()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
