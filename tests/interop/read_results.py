"""Reads query answers the way a client library would.

    read_results.py ARROW_STREAM_FILE PARQUET_FILE

Prints a JSON object: rows and the first row as pyarrow reads the Arrow IPC
stream, and rows as pyarrow and DuckDB read the Parquet file.
"""

import json
import sys

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq


def main(arrow_path: str, parquet_path: str) -> int:
    with pa.OSFile(arrow_path, "rb") as f:
        stream = pa.ipc.open_stream(f).read_all()
    parquet = pq.read_table(parquet_path)
    duck_rows, duck_sum = duckdb.connect().execute(
        f"SELECT count(*), sum(n) FROM read_parquet('{parquet_path}')"
    ).fetchone()
    print(json.dumps({
        "arrow_rows": stream.num_rows,
        "arrow_columns": stream.column_names,
        "arrow_first": stream.slice(0, 1).to_pylist()[0],
        "parquet_rows": parquet.num_rows,
        "duckdb_rows": duck_rows,
        "duckdb_sum": int(duck_sum),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
