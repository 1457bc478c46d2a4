#!/usr/bin/env bash
# The demo: a simulated fleet streams through the real local broker into the
# processor, which writes Parquet history; the query service answers SQL
# over it. Prints the results, then keeps the services up until Ctrl-C
# (DEMO_EXIT=1 exits after printing).
#
# Each run is self-contained: its own topics (prefix demo<time>., or
# GPULEDGER_TOPIC_PREFIX), consumer group and history under var/demo/<time>,
# because the month it replays is the same every time. The processor's own
# clock ticks are off: the demo's ledger brings its own time (November 2026).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${CARGO_TARGET_DIR:-$repo/target}/debug
bootstrap=${GPULEDGER_KAFKA_BOOTSTRAP:-127.0.0.1:${GPULEDGER_KAFKA_PORT:-9092}}
run_id=$(date +%Y%m%d%H%M%S)
cluster="demo-$run_id"
prefix=${GPULEDGER_TOPIC_PREFIX:-demo$run_id.}
work="$repo/var/demo/$run_id"
history="$work/history"
mkdir -p "$work"

say() { printf '\033[1m%s\033[0m\n' "$*"; }
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

if [ -z "${GPULEDGER_KAFKA_BOOTSTRAP:-}" ]; then
  say "Making sure the topics exist"
  GPULEDGER_TOPIC_PREFIX=$prefix "$repo/deploy/local/kafka.sh" topics
fi

admin_token="demo-admin-$run_id"
say "Starting the processor (history in $history)"
"$bin/gpuledger-processor" run --kafka-bootstrap "$bootstrap" --topic-prefix "$prefix" \
  --history-root "$history" --group-id "gpuledger-demo-$run_id" --flush-interval-ms 500 \
  --state-dir "$work/state" --clock-interval-s 0 \
  --api-listen 127.0.0.1:${GPULEDGER_API_PORT:-0} --api-token "admin:$admin_token" --cluster "$cluster" \
  > "$work/processor.out" 2> "$work/processor.log" &
pids+=($!)
for _ in $(seq 1 300); do grep -q listening "$work/processor.out" 2>/dev/null && break; sleep 0.1; done
api_url=$(sed -n 's/^control API listening on //p' "$work/processor.out")
[ -n "$api_url" ] || { cat "$work/processor.log"; echo "processor did not start"; exit 1; }

say "Starting the query service"
"$bin/gpuledger-query" serve --history-root "$history" --listen 127.0.0.1:${GPULEDGER_QUERY_PORT:-0} --pg-listen 127.0.0.1:${GPULEDGER_QUERY_PG_PORT:-0} \
  > "$work/query.out" 2> "$work/query.log" &
pids+=($!)
for _ in $(seq 1 100); do grep -q listening "$work/query.out" 2>/dev/null && break; sleep 0.1; done
query_url=$(sed -n 's/^listening on //p' "$work/query.out")
query_pg=$(sed -n 's/^postgres listening on //p' "$work/query.out")
[ -n "$query_url" ] || { cat "$work/query.log"; echo "query service did not start"; exit 1; }

say "Simulating a lab pool of 4 nodes × 2 GPUs (one split into MIG 3g+2g+1g+1g) for one hour of 10 s samples"
"$bin/gpuledger-collector" simulate --kafka-bootstrap "$bootstrap" --topic-prefix "$prefix" \
  --cluster "$cluster" --pool lab --nodes 4 --gpus-per-node 2 --ticks 360 --start 2026-11-03T23:30:00Z --summary \
  > "$work/summary.json" 2> "$work/collector.log"
expected=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["samples"])' "$work/summary.json")
say "The collector delivered $expected samples; waiting for them in the history"

sql() { curl -sS --fail-with-body -H 'content-type: application/json' \
  --data "$(python3 -c 'import json,sys; print(json.dumps({"sql": sys.argv[1]}))' "$1")" "$query_url/v1/sql"; }
for _ in $(seq 1 120); do
  got=$(sql "SELECT count(*) AS n FROM samples WHERE cluster = '$cluster'" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["n"])')
  [ "$got" = "$expected" ] && break
  sleep 0.5
done
[ "$got" = "$expected" ] || { echo "only $got of $expected samples arrived (see $work/processor.log)"; exit 1; }

query="SELECT date, node, count(*) AS samples,
  round(avg(sm_util_pct), 1) AS avg_sm_util_pct,
  sum(CASE WHEN mig_profile IS NULL THEN 0 ELSE 1 END) AS mig_samples,
  round(max(energy_mj) / 3.6e9, 3) AS energy_counter_kwh
FROM samples WHERE cluster = '$cluster'
GROUP BY date, node ORDER BY date, node"
say "SQL over the Parquet history ($query_url/v1/sql):"
printf '%s\n\n' "$query"
sql "$query" | python3 -c '
import json, sys
rows = json.load(sys.stdin)
cols = list(rows[0].keys())
width = {c: max(len(c), *(len(str(r.get(c))) for r in rows)) for c in cols}
print("  ".join(c.ljust(width[c]) for c in cols))
print("  ".join("-" * width[c] for c in cols))
for r in rows:
    print("  ".join(str(r.get(c)).ljust(width[c]) for c in cols))
'
echo
say "Every row above travelled collector → Kafka ($bootstrap, topic ${prefix}gpuledger.telemetry) → processor → Parquet → DataFusion."
echo

say "Replaying November 2026 for four tenants through the control API"
python3 "$repo/deploy/local/demo_ledger.py" --cluster "$cluster" > "$work/ledger.ndjson"
split -l 1000 -d "$work/ledger.ndjson" "$work/ledger.part."
for part in "$work"/ledger.part.*; do
  curl -sS --fail-with-body -H "Authorization: Bearer $admin_token" \
    --data-binary @"$part" "$api_url/v1/events" > /dev/null
done
echo "  $(wc -l < "$work/ledger.ndjson") events: jobs and retries, admissions, reservations, a failed GPU, storage, egress, a price change"
for _ in $(seq 1 240); do
  closed=$(sql "SELECT count(DISTINCT pool) AS n FROM ledger_events WHERE type = 'Clock' AND event_time >= '2026-12-01T00:00:00Z'" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["n"])')
  [ "$closed" = "2" ] && break
  sleep 0.5
done
[ "$closed" = "2" ] || { echo "the ledger did not reach the month's end (see $work/processor.log)"; exit 1; }

say "The November 2026 statement ($query_url/v1/statements?period=2026-11):"
curl -sS --fail-with-body "$query_url/v1/statements?period=2026-11" > "$work/statement.json"
python3 - "$work/statement.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
tenants = [t["tenant"] for t in s["tenants"]]
lines = list(s["tenants"][0]["lines"].keys())
width = max(len(l) for l in lines + ["cost_per_completed_job"])
cols = [max(12, len(t)) for t in tenants]
print(f"  {'(' + s['currency'] + ')':<{width}}  " + "  ".join(t.rjust(c) for t, c in zip(tenants, cols)))
for line in lines:
    if line == "total":
        print("  " + "-" * width + "  " + "  ".join("-" * c for c in cols))
    print(f"  {line:<{width}}  " + "  ".join(t["lines"][line].rjust(c) for t, c in zip(s["tenants"], cols)))
print()
for key in ("failed_work", "retried_work", "completed_jobs", "cost_per_completed_job"):
    print(f"  {key:<{width}}  " + "  ".join(str(t["breakdown"].get(key)).rjust(c) for t, c in zip(s["tenants"], cols)))
print()
print(f"  platform: unallocated {s['platform']['unallocated']}, total billed {s['platform']['total']}")
PY
echo
echo "  SQL API:  curl -H 'content-type: application/json' -d '{\"sql\":\"SELECT count(*) FROM samples\"}' $query_url/v1/sql"
echo "  Statements: $query_url/v1/statements?period=2026-11 (add &format=csv for CSV)"
echo "  PostgreSQL: psql -h ${query_pg%:*} -p ${query_pg##*:} -U finance -d gpuledger -c 'SELECT * FROM chargeback LIMIT 5'"
echo "  Control API: $api_url (token: $admin_token), e.g."
echo "    curl -H 'Authorization: Bearer $admin_token' --data-binary @ledger.ndjson $api_url/v1/events"
echo "  History:  $history"
if [ "${DEMO_EXIT:-0}" = "1" ]; then exit 0; fi
say "Services stay up; press Ctrl-C to stop."
wait
