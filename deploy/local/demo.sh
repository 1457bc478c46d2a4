#!/usr/bin/env bash
# The demo: a simulated fleet streams through the real local broker into the
# processor, which writes Parquet history; the query service answers SQL
# over it. Prints the results, then keeps the services up until Ctrl-C
# (DEMO_EXIT=1 exits after printing).
#
# It uses the real topic names (GPULEDGER_TOPIC_PREFIX, default none) and
# keeps its history in var/demo/history with one consumer group, so a rerun
# resumes where the last one stopped; each run's fleet is its own cluster
# (demo-<time>), which is what the printed query selects.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${CARGO_TARGET_DIR:-$repo/target}/debug
bootstrap=${GPULEDGER_KAFKA_BOOTSTRAP:-127.0.0.1:${GPULEDGER_KAFKA_PORT:-9092}}
run_id=$(date +%Y%m%d%H%M%S)
cluster="demo-$run_id"
prefix=${GPULEDGER_TOPIC_PREFIX:-}
work="$repo/var/demo"
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
  --history-root "$history" --group-id gpuledger-demo --flush-interval-ms 500 \
  --api-listen 127.0.0.1:${GPULEDGER_API_PORT:-0} --api-token "admin:$admin_token" --cluster "$cluster" \
  > "$work/processor.out" 2> "$work/processor.log" &
pids+=($!)
for _ in $(seq 1 300); do grep -q listening "$work/processor.out" 2>/dev/null && break; sleep 0.1; done
api_url=$(sed -n 's/^control API listening on //p' "$work/processor.out")
[ -n "$api_url" ] || { cat "$work/processor.log"; echo "processor did not start"; exit 1; }

say "Starting the query service"
"$bin/gpuledger-query" serve --history-root "$history" --listen 127.0.0.1:${GPULEDGER_QUERY_PORT:-0} \
  > "$work/query.out" 2> "$work/query.log" &
pids+=($!)
for _ in $(seq 1 100); do grep -q listening "$work/query.out" 2>/dev/null && break; sleep 0.1; done
query_url=$(sed -n 's/^listening on //p' "$work/query.out")
[ -n "$query_url" ] || { cat "$work/query.log"; echo "query service did not start"; exit 1; }

say "Simulating 4 nodes × 2 GPUs (one split into MIG 3g+2g+1g+1g) for one hour of 10 s samples"
"$bin/gpuledger-collector" simulate --kafka-bootstrap "$bootstrap" --topic-prefix "$prefix" \
  --cluster "$cluster" --nodes 4 --gpus-per-node 2 --ticks 360 --start 2026-11-03T23:30:00Z --summary \
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
echo "  SQL API:  curl -H 'content-type: application/json' -d '{\"sql\":\"SELECT count(*) FROM samples\"}' $query_url/v1/sql"
echo "  Control API: $api_url (token: $admin_token), e.g."
echo "    curl -H 'Authorization: Bearer $admin_token' --data-binary @ledger.ndjson $api_url/v1/events"
echo "  History:  $history"
if [ "${DEMO_EXIT:-0}" = "1" ]; then exit 0; fi
say "Services stay up; press Ctrl-C to stop."
wait
