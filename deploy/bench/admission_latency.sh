#!/usr/bin/env bash
# Benchmarks the admission round trip (issue 4): `POST /v1/admission` over
# loopback → the request appended to the ledger topic → read and decided by
# the processor's ledger worker → answered (the decision's transaction
# commits beside it; `BENCH_PROCESSOR_ARGS="--answer-at committed"` answers
# only after the commit). Requests arrive open-loop at a fixed rate (default
# 200/s for 30 s) from 32 client threads with keep-alive connections; the
# peer, measured in the same run at the same rate by the same client, is
# `GET /healthz` on the same server (HTTP alone, no Kafka).
#
#   deploy/bench/admission_latency.sh        (needs the local broker running)
#
# With BENCH_BULK_BYTES (say 2000000), an admin posts a body of that many
# bytes of NDJSON usage records to `POST /v1/events` every second while the
# admissions run, and the posts' own times are printed too (issue "Trust
# boundaries": a bulk post must not hold admissions up).
#
# Settings: BENCH_RATE (200), BENCH_SECONDS (30), BENCH_LINGER_MS (0),
# BENCH_BULK_BYTES (0: none), BENCH_PROCESSOR_ARGS (more processor flags),
# BENCH_PROFILE (bench; see deploy/bench/profile.sh), CARGO_TARGET_DIR.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
. "$repo/deploy/bench/profile.sh"
rate=${BENCH_RATE:-200}
seconds=${BENCH_SECONDS:-30}
bootstrap=${GPULEDGER_KAFKA_BOOTSTRAP:-127.0.0.1:9092}
prefix="bench-adm-$(date +%s)."
work="$repo/var/bench-${prefix%.}"
mkdir -p "$work"

bench_build gpuledger-processor gpuledger-query
GPULEDGER_TOPIC_PREFIX=$prefix "$repo/deploy/local/kafka.sh" topics >&2

"$bin/gpuledger-processor" --log-filter "${GPULEDGER_LOG:-warn}" run --kafka-bootstrap "$bootstrap" --topic-prefix "$prefix" \
  --history-root "$work/history" --state-dir "$work/state" --group-id "${prefix}processor" \
  --api-listen 127.0.0.1:0 --clock-interval-s 0 --api-token "admin:bench-admin,scheduler:bench-scheduler" \
  --ledger-linger-ms "${BENCH_LINGER_MS:-0}" ${BENCH_PROCESSOR_ARGS:-} \
  > "$work/processor.out" 2> "$work/processor.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do grep -q listening "$work/processor.out" 2>/dev/null && break; sleep 0.05; done
api=$(sed -n 's/^control API listening on //p' "$work/processor.out")
echo "processor at $api, topics $prefix*" >&2

python3 - "$api" "$rate" "$seconds" "${BENCH_BULK_BYTES:-0}" <<'PY'
import datetime, http.client, json, queue, statistics, sys, threading, time, urllib.parse

api, rate, seconds, bulk_bytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
host = urllib.parse.urlparse(api).netloc
t0 = "2026-11-01T00:00:00Z"

def call(conn, method, path, token=None, body=None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    conn.request(method, path, body=body, headers=headers)
    r = conn.getresponse()
    return r.status, r.read()

setup = [
    {"type": "NodeInventory", "event_id": "bench-inv", "event_time": t0, "source": "bench", "cluster": "c",
     "pool": "h200", "node": "n1", "devices": [
         {"device_uuid": f"GPU-bench-{i}", "model": "NVIDIA H200", "slices": 7, "max_slices": 7,
          "memory_bytes": 141000000000} for i in range(64)]},
    {"type": "TenantPolicy", "event_id": "bench-pol", "event_time": t0, "source": "bench", "cluster": "c",
     "pool": "h200", "tenant": "team-a", "nominal_ge": "48", "burst_ge": "8", "enforcement": "deny"},
]
conn = http.client.HTTPConnection(host, timeout=30)
status, body = call(conn, "POST", "/v1/events?mode=import", "bench-admin", "\n".join(json.dumps(e) for e in setup) + "\n")
assert status == 200, (status, body)
# Warm-up: the first round trip sets up the transaction and the reader.
status, body = call(conn, "POST", "/v1/admission", "bench-scheduler",
                    json.dumps({"pool": "h200", "request_id": "warm", "job_id": "warm", "tenant": "team-a",
                                "slices": 1, "max_slices": 7}))
assert status == 200, (status, body)

def bulk_bodies(stop, took):
    """Every second until `stop`: one body of `bulk_bytes` usage records."""
    c = http.client.HTTPConnection(host, timeout=60)
    k = 0
    while not stop.is_set():
        began = time.perf_counter()
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        lines, size = [], 0
        while size < bulk_bytes - 400:
            line = json.dumps({"type": "UsageRecord", "event_id": f"bulk-{k}", "event_time": now,
                               "source": "bench", "cluster": "c", "pool": "h200", "tenant": "team-a",
                               "kind": "storage_gb_hours", "quantity": "1", "start": now, "end": now})
            lines.append(line)
            size += len(line) + 1
            k += 1
        status, body = call(c, "POST", "/v1/events", "bench-admin", "\n".join(lines) + "\n")
        assert status == 200, (status, body[:300])
        took.append((time.perf_counter() - began, size))
        stop.wait(max(0.0, 1.0 - (time.perf_counter() - began)))

def run(kind):
    n = rate * seconds
    jobs = queue.Queue()
    latencies, outcomes, lock = [], {}, threading.Lock()
    def worker():
        c = http.client.HTTPConnection(host, timeout=30)
        while True:
            item = jobs.get()
            if item is None:
                return
            i, due = item
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            start = time.perf_counter()
            if kind == "admission":
                status, body = call(c, "POST", "/v1/admission", "bench-scheduler", json.dumps(
                    {"pool": "h200", "request_id": f"r{i}", "job_id": f"j{i}", "tenant": "team-a",
                     "slices": 1, "max_slices": 7}))
                outcome = json.loads(body).get("decision", status) if status == 200 else status
            else:
                status, _ = call(c, "GET", "/healthz")
                outcome = status
            took = time.perf_counter() - start
            with lock:
                latencies.append(took)
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
    threads = [threading.Thread(target=worker) for _ in range(32)]
    for t in threads:
        t.start()
    begin = time.perf_counter() + 0.2
    for i in range(n):
        jobs.put((i, begin + i / rate))
    for _ in threads:
        jobs.put(None)
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - begin
    latencies.sort()
    q = lambda p: latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000
    print(f"{kind:10} {len(latencies)} requests in {elapsed:.1f} s ({len(latencies) / elapsed:.0f}/s): "
          f"p50 {q(0.50):.2f} ms, p99 {q(0.99):.2f} ms, max {latencies[-1] * 1000:.2f} ms; {outcomes}")
    return q(0.50), q(0.99)

peer = run("healthz")
stop, bulk = threading.Event(), []
if bulk_bytes:
    poster = threading.Thread(target=bulk_bodies, args=(stop, bulk))
    poster.start()
adm = run("admission")
if bulk_bytes:
    stop.set()
    poster.join()
    times = sorted(t for t, _ in bulk)
    print(f"bulk posts: {len(bulk)} bodies of {bulk[0][1]:,} bytes during the admissions; "
          f"each took {times[len(times) // 2] * 1000:.0f} ms at the median, {times[-1] * 1000:.0f} ms at most")
print(f"admission p99 / healthz p99: {adm[1] / peer[1]:.1f}×")
PY

# Where the time goes: the processor's own histograms (cumulative buckets).
curl -s "$api/metrics" | grep -E '^gpuledger_(admission_seconds|admission_append_seconds|decision_transaction_seconds)_(bucket|sum|count)' \
  | grep -E '_sum|_count|le="(0.005|0.01|0.025|0.05|0.1|0.25)"'
