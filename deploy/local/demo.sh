#!/usr/bin/env bash
# The demo: a month of a shared GPU fleet. Simulated collectors stream
# November 2026 at accelerated time through the real local broker into the
# processor, which decides admissions, reservations and bursts and writes
# Parquet history; the query service prices the month. Prints what happened
# and each tenant's statement, then keeps the services up until Ctrl-C
# (DEMO_EXIT=1 exits after printing).
#
# Each run is self-contained: its own topics (prefix demo<time>., or
# GPULEDGER_TOPIC_PREFIX), consumer group and history under var/demo/<time>,
# because the month it replays is the same every time. The processor's own
# clock ticks are off: the simulated month brings its own time.
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

# November 2026: the company's side of the ledger (prices, inventory,
# quotas, reservations) goes in through the control API first; then the
# simulated collectors run the month at accelerated time straight into
# Kafka; then the month's metered storage and egress, and its end.
month() { python3 "$repo/deploy/local/demo_month.py" "$@" --collector "$bin/gpuledger-collector" --cluster "$cluster"; }
post_events() {
  curl -sS --fail-with-body -H "Authorization: Bearer $admin_token" \
    --data-binary @"$1" "$api_url/v1/events?mode=import" > /dev/null
}
sql() { curl -sS --fail-with-body -H 'content-type: application/json' \
  --data "$(python3 -c 'import json,sys; print(json.dumps({"sql": sys.argv[1]}))' "$1")" "$query_url/v1/sql"; }
table() {
  python3 -c '
import json, sys
rows = json.load(sys.stdin)
cols = list(rows[0].keys())
width = {c: max(len(c), *(len(str(r.get(c))) for r in rows)) for c in cols}
print("  " + "  ".join(c.ljust(width[c]) for c in cols))
print("  " + "  ".join("-" * width[c] for c in cols))
for r in rows:
    print("  " + "  ".join(str(r.get(c)).ljust(width[c]) for c in cols))
'
}

say "Setting up November 2026: price books, the fleet's inventory, four tenants' quotas and budgets, reservations"
month setup > "$work/setup.ndjson"
post_events "$work/setup.ndjson"

mapfile -t sim_args < <(month sim-args)
say "Running the simulated collectors through November at accelerated time"
echo "  2 pools: h100 (8 H100s, one split into MIG 3g+2g+1g+1g) for team-vision and team-search,"
echo "           h200 (8 H200s) for team-llm and team-research; a sample per device per minute"
"$bin/gpuledger-collector" simulate --kafka-bootstrap "$bootstrap" --topic-prefix "$prefix" \
  --cluster "$cluster" "${sim_args[@]}" --summary > "$work/summary.json" 2> "$work/collector.log"
python3 - "$work/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"  sent {s['samples']:,} samples, {s['admission_requests']:,} admission requests and {s['job_events']:,} job events")
PY
month close > "$work/close.ndjson"
post_events "$work/close.ndjson"

say "Waiting for the processor to fold the month into decisions and Parquet history"
expected=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["samples"])' "$work/summary.json")
for _ in $(seq 1 600); do
  got=$(sql "SELECT count(*) AS n FROM samples WHERE cluster = '$cluster'" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["n"])')
  closed=$(sql "SELECT count(DISTINCT pool) AS n FROM ledger_events WHERE type = 'Clock' AND event_time >= '2026-12-01T00:00:00Z'" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["n"])')
  [ "$got" = "$expected" ] && [ "$closed" = "2" ] && break
  sleep 0.5
done
[ "$got" = "$expected" ] || { echo "only $got of $expected samples arrived (see $work/processor.log)"; exit 1; }
[ "$closed" = "2" ] || { echo "the ledger did not reach the month's end (see $work/processor.log)"; exit 1; }

say "What the ledger decided ($query_url/v1/sql over the decisions table):"
sql "SELECT tenant,
  sum(CASE WHEN type = 'AdmissionDecision' AND kind = 'reserved' THEN 1 ELSE 0 END) AS admitted_reserved,
  sum(CASE WHEN type = 'AdmissionDecision' AND kind = 'quota' THEN 1 ELSE 0 END) AS admitted_quota,
  sum(CASE WHEN type = 'AdmissionDecision' AND kind = 'burst' THEN 1 ELSE 0 END) AS admitted_burst,
  sum(CASE WHEN type = 'AdmissionDecision' AND decision = 'deny' THEN 1 ELSE 0 END) AS denied,
  sum(CASE WHEN type = 'BurstTriggered' THEN 1 ELSE 0 END) AS on_demand_asked,
  sum(CASE WHEN type = 'QuotaViolation' THEN 1 ELSE 0 END) AS quota_violations,
  sum(CASE WHEN type = 'BudgetAlert' THEN 1 ELSE 0 END) AS budget_alerts
FROM decisions WHERE tenant IS NOT NULL GROUP BY tenant ORDER BY tenant" | table
echo
sql "SELECT reservation_id, tenant, CAST(slices AS VARCHAR) || ' GE' AS size, CAST(start AS VARCHAR) AS start,
  CAST(\"end\" AS VARCHAR) AS \"end\", decision, reason FROM reservations ORDER BY reservation_id" | table
echo
sql "SELECT pool, count(*) AS gpus_fallen_off_the_bus, min(event_time) AS first, max(event_time) AS last
FROM ledger_events WHERE type = 'DeviceHealth' AND state = 'failed' GROUP BY pool ORDER BY pool" | table
echo

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
echo "    curl -H 'Authorization: Bearer $admin_token' --data-binary @$work/close.ndjson $api_url/v1/events?mode=import"
echo "  History:  $history"
if [ "${DEMO_EXIT:-0}" = "1" ]; then exit 0; fi
say "Services stay up; press Ctrl-C to stop."
wait
