"""Energy per tenant straight from the raw samples of a history, with
DuckDB: each sample's counter delta from the device's previous sample (a
decrease is a restart from 0), credited to the tenant the sample names.

    generated_energy.py ROOT

Prints a JSON object: tenant → millijoules (as a string), and the row
counts of `samples` and of the samples summed in `device_hourly`.
"""

import json
import sys

import duckdb


def main(root: str) -> int:
    db = duckdb.connect()
    samples = f"read_parquet('{root}/samples/*/*.parquet', hive_partitioning = true)"
    hourly = f"read_parquet('{root}/device_hourly/*/*.parquet', hive_partitioning = true)"
    rows = db.execute(
        f"""WITH s AS (
              SELECT tenant, energy_mj,
                     lag(energy_mj) OVER (PARTITION BY device_uuid ORDER BY "time") AS before
              FROM {samples} WHERE energy_mj IS NOT NULL)
            SELECT tenant, CAST(sum(CASE WHEN energy_mj < before THEN energy_mj
                                         ELSE energy_mj - before END) AS HUGEINT)
            FROM s WHERE before IS NOT NULL AND tenant IS NOT NULL
            GROUP BY tenant"""
    ).fetchall()
    (count,) = db.execute(f"SELECT count(*) FROM {samples}").fetchone()
    (rolled,) = db.execute(f"SELECT sum(samples) FROM {hourly}").fetchone()
    print(json.dumps({
        "energy_mj": {tenant: str(mj) for tenant, mj in rows},
        "samples": count,
        "rolled_up": int(rolled),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
