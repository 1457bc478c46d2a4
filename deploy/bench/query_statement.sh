#!/usr/bin/env bash
# Benchmarks the query service over a month of history for a large fleet:
#
# 1. `gpuledger-processor generate` writes 30 days × 1,000 GPUs at 10-second
#    samples (259 million `samples` rows, their `device_hourly` roll-up and
#    the ledger tables) straight to Parquet (skipped when the folder already
#    holds the same generation);
# 2. the query service answers `GET /v1/statements?period=2026-11` for all
#    tenants, cold (first request) and warm (repeated);
# 3. two ad-hoc SQL queries over the raw samples run on the query service
#    (`POST /v1/sql`) and on DuckDB over the same files, alternately, in the
#    same run; both engines' answers are compared.
#
#   deploy/bench/query_statement.sh [ROOT]
#
# Environment: BENCH_GPUS (1000), BENCH_DAYS (30), BENCH_RUNS (5),
# BENCH_PROFILE (bench; see deploy/bench/profile.sh), CARGO_TARGET_DIR.
# Needs the Python environment of `make setup` (duckdb).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
gpus=${BENCH_GPUS:-1000}
days=${BENCH_DAYS:-30}
runs=${BENCH_RUNS:-5}
root=${1:-$repo/var/bench/query-history}
python=${GPULEDGER_PYTHON:-$HOME/.cache/gpuledger/venv/bin/python}

. "$repo/deploy/bench/profile.sh"
bench_build gpuledger-processor gpuledger-query

marker="gpus=$gpus days=$days interval=10 seed=1"
if [ "$(cat "$root/.generated" 2>/dev/null)" != "$marker" ]; then
  rm -rf "$root"
  mkdir -p "$root"
  echo "generating $marker into $root" >&2
  /usr/bin/time -f "generate: %e s, peak RSS %M KiB" \
    "$bin/gpuledger-processor" generate --history-root "$root" --gpus "$gpus" --days "$days" \
    --interval-s 10 --start 2026-11-01 --seed 1 > "$root/.summary.json"
  echo "$marker" > "$root/.generated"
fi
cat "$root/.summary.json" >&2
echo "on disk: $(du -sb "$root/samples" | cut -f1) bytes of samples, $(du -sb "$root/device_hourly" | cut -f1) of device_hourly" >&2

work=$(mktemp -d)
"$bin/gpuledger-query" --log-filter warn serve --history-root "$root" --listen 127.0.0.1:0 \
  --memory-limit-mb 8192 --pg-listen off --query-timeout-s 600 > "$work/query.out" 2> "$work/query.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 600); do grep -q "listening on" "$work/query.out" 2>/dev/null && break; sleep 0.05; done
api=$(sed -n 's/^listening on //p' "$work/query.out" | head -1)

"$python" - "$api" "$root" "$runs" <<'PY'
import json, statistics, sys, time, urllib.request
import duckdb

api, root, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])

def get(path):
    t = time.perf_counter()
    with urllib.request.urlopen(api + path, timeout=600) as r:
        body = r.read()
    return time.perf_counter() - t, body

def sql(text):
    req = urllib.request.Request(api + "/v1/sql", data=text.encode(), method="POST",
                                 headers={"Content-Type": "text/plain", "Accept": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        body = r.read()
    return time.perf_counter() - t, json.loads(body)

cold, first = get("/v1/statements?period=2026-11")
warm = []
for _ in range(runs):
    t, body = get("/v1/statements?period=2026-11")
    assert body == first, "a warm statement differs from the cold one"
    warm.append(t)
statement = json.loads(first)
print(f"statement 2026-11, {len(statement['tenants'])} tenants: cold {cold*1000:.0f} ms, "
      f"warm median {statistics.median(warm)*1000:.1f} ms (min {min(warm)*1000:.1f}, max {max(warm)*1000:.1f})")
for t in statement["tenants"]:
    print(f"  {t['tenant']:<12} total {t['lines']['total']:>12}  energy {t['lines']['energy']:>10}  "
          f"idle_allocated {t['breakdown'].get('idle_allocated')}")

queries = {
    "Q1 per pool and day: mean SM activity and GPU-hours held (full scan)": (
        """SELECT pool, CAST("date" AS VARCHAR) AS day, avg(sm_util_pct) AS avg_sm,
                  sum(CASE WHEN job_id IS NOT NULL THEN interval_ms ELSE 0 END) / 3600000.0 AS held_gpu_hours
           FROM samples GROUP BY pool, "date" ORDER BY pool, day"""),
    "Q2 one week: idle GPU-hours per tenant (time filter)": (
        """SELECT tenant, sum(CASE WHEN sm_util_pct < 5 THEN interval_ms ELSE 0 END) / 3600000.0 AS idle_gpu_hours,
                  count(*) AS samples
           FROM samples
           WHERE "time" >= TIMESTAMP '2026-11-10 00:00:00+00' AND "time" < TIMESTAMP '2026-11-17 00:00:00+00'
             AND tenant IS NOT NULL
           GROUP BY tenant ORDER BY tenant"""),
}
duck = duckdb.connect()
duck.execute("SET TimeZone = 'UTC'")
duck.execute(f"""CREATE VIEW samples AS SELECT * FROM read_parquet('{root}/samples/*/*.parquet',
                 hive_partitioning = true)""")

def rows_of(records):
    return [tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in records]

for name, text in queries.items():
    df_times, duck_times = [], []
    df_rows = duck_rows = None
    for i in range(runs + 1):
        t, rows = sql(text)
        t0 = time.perf_counter()
        got = duck.execute(text).fetchall()
        t1 = time.perf_counter()
        if i == 0:
            continue  # warm-up of both
        df_times.append(t)
        duck_times.append(t1 - t0)
        df_rows = rows_of([tuple(r.values()) for r in rows])
        duck_rows = rows_of(got)
    same = len(df_rows) == len(duck_rows) and all(
        all((abs(a - b) <= 1e-6 * max(1, abs(b))) if isinstance(a, float) else str(a) == str(b)
            for a, b in zip(x, y)) for x, y in zip(df_rows, duck_rows))
    d, k = statistics.median(df_times), statistics.median(duck_times)
    print(f"{name}: {len(df_rows)} rows, answers {'equal' if same else 'DIFFER'}")
    print(f"  query service {d*1000:.0f} ms, DuckDB {k*1000:.0f} ms (medians of {runs}): ratio {d/k:.2f}×")
PY
