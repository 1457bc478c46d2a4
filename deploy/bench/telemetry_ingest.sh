#!/usr/bin/env bash
# Benchmark: telemetry ingest, Kafka → durable Parquet (`samples`), against
# a raw read of the same topic with kcat (-C -e -o beginning), in one run on
# one machine; and bytes per GpuSample row on disk. Two writers are timed:
# `catch-up`, which like kcat -e reads to the end and exits, and the
# streaming `run`, until its last file (rolled by age) is durable.
#
#   deploy/bench/telemetry_ingest.sh        (needs the local broker running)
#
# Settings: BENCH_NODES (default 100; 5 devices each: 1 GPU split 3g+2g+1g+1g
# and 1 whole GPU), BENCH_TICKS (default 20000: 10,000,000 samples, so that
# start-up and the last files' roll by age, up to --flush-interval-ms, are
# a small part of the figure), CARGO_TARGET_DIR; BENCH_PREFIX=<prefix of an
# earlier run> measures again on the topic that run produced (the same
# BENCH_NODES and BENCH_TICKS), without producing it anew; BENCH_ROUNDS
# (default 3) is how many times kcat and `catch-up` read the topic, one
# after the other: a single read of either varies by a fifth from one
# minute to the next on a shared machine, so each round's ratio and their
# median are printed.
# Builds with the `bench` profile (release without LTO) unless
# BENCH_PROFILE says otherwise (deploy/bench/profile.sh).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$repo/deploy/bench/profile.sh"
nodes=${BENCH_NODES:-100}
ticks=${BENCH_TICKS:-20000}
samples=$((nodes * 5 * ticks))
bootstrap=${GPULEDGER_KAFKA_BOOTSTRAP:-127.0.0.1:9092}
prefix=${BENCH_PREFIX:-"bench-$(date +%s)."}
run="bench-$(date +%s)"
work="$repo/var/$run"
mkdir -p "$work"
now() { date +%s.%N; }

bench_build gpuledger-processor gpuledger-collector
t0=$(now)
if [ -z "${BENCH_PREFIX:-}" ]; then
  GPULEDGER_TOPIC_PREFIX=$prefix GPULEDGER_TELEMETRY_PARTITIONS=4 "$repo/deploy/local/kafka.sh" topics
  echo "producing $samples samples ($nodes nodes × 5 devices × $ticks ticks) on ${prefix}gpuledger.telemetry" >&2
  "$bin/gpuledger-collector" --log-filter warn simulate --kafka-bootstrap "$bootstrap" --topic-prefix "$prefix" \
    --nodes "$nodes" --gpus-per-node 2 --ticks "$ticks" --start 2026-11-01T00:00:00Z --summary > "$work/summary.json"
fi
t1=$(now)

topic="${prefix}gpuledger.telemetry"
# Each round: kcat, then the batch writer, `catch-up`, which reads every
# partition to its end, writes the samples durably and exits, as kcat -e
# reads to the end and exits.
rounds=${BENCH_ROUNDS:-3}
reads=()
for round in $(seq 1 "$rounds"); do
  t2=$(now)
  kcat -C -b "$bootstrap" -t "$topic" -o beginning -e -q -f '%s' > /dev/null
  t3=$(now)
  rm -rf "$work/batch"
  t6=$(now)
  "$bin/gpuledger-processor" --log-filter warn catch-up --kafka-bootstrap "$bootstrap" --topic-prefix "$prefix" \
    --history-root "$work/batch" --group-id "${run}-batch-$round" --flush-rows 100000 > "$work/catch-up.json"
  t7=$(now)
  reads+=("$t2,$t3,$t6,$t7")
done

# The streaming writer: `run`, until its files (rolled by size, the last
# ones by age) hold every sample.
"$bin/gpuledger-processor" --log-filter warn run --kafka-bootstrap "$bootstrap" --topic-prefix "$prefix" \
  --history-root "$work/history" --state-dir "$work/state" --group-id "${run}-processor" \
  --api-listen 127.0.0.1:0 --clock-interval-s 0 --flush-rows 100000 --flush-interval-ms 2000 \
  > "$work/processor.out" 2> "$work/processor.log" &
pid=$!
t4=$(now)
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do grep -q listening "$work/processor.out" 2>/dev/null && break; sleep 0.05; done
api=$(sed -n 's/^control API listening on //p' "$work/processor.out")
t_read=
while true; do
  metrics=$(curl -s "$api/metrics")
  written=$(echo "$metrics" | awk '$1 == "gpuledger_samples_written_total" {print $2}')
  polled=$(echo "$metrics" | awk '$1 == "gpuledger_telemetry_records_polled_total" {print $2}')
  [ -z "$t_read" ] && [ "${polled:-0}" -ge "$samples" ] && t_read=$(now)
  [ "${written:-0}" -ge "$samples" ] && break
  kill -0 $pid 2>/dev/null || { tail "$work/processor.log"; exit 1; }
  sleep 0.05
done
t5=$(now)
bytes=$(du -sb "$work/history/samples" | cut -f1)
files=$(find "$work/history/samples" -name '*.parquet' | wc -l)

python3 - "$samples" "$t0" "$t1" "${reads[*]}" "$t4" "$t5" "$bytes" "$files" "${t_read:-$t5}" "$work/catch-up.json" <<'PY'
import json, statistics, sys
n = int(sys.argv[1]); t0, t1 = map(float, sys.argv[2:4])
reads = [tuple(map(float, r.split(","))) for r in sys.argv[4].split()]
t4, t5 = map(float, sys.argv[5:7]); size = int(sys.argv[7]); files = int(sys.argv[8])
t_read = float(sys.argv[9])
batch = json.load(open(sys.argv[10]))
assert batch["samples"] == n, f"catch-up wrote {batch['samples']} samples, not {n}"
produce, ingest = t1 - t0, t5 - t4
print(f"samples                 {n}")
if produce > 1:
    print(f"produce (collector)     {produce:.2f} s  {n / produce:,.0f} samples/s")
ratios = []
for i, (t2, t3, t6, t7) in enumerate(reads, 1):
    raw, catch_up = t3 - t2, t7 - t6
    ratios.append(raw / catch_up)
    print(f"round {i}: raw read (kcat) {raw:.2f} s  {n / raw:,.0f} samples/s; catch-up (processor, "
          f"start to exit, every row durable) {catch_up:.2f} s  {n / catch_up:,.0f} samples/s; "
          f"catch-up / raw read {raw / catch_up:.2f}×")
raw = statistics.median(t3 - t2 for t2, t3, _, _ in reads)
catch_up = statistics.median(t7 - t6 for _, _, t6, t7 in reads)
print(f"raw read (kcat)         median {raw:.2f} s  {n / raw:,.0f} samples/s")
print(f"catch-up (processor)    median {catch_up:.2f} s  {n / catch_up:,.0f} samples/s")
print(f"catch-up / raw read     median of the rounds' ratios {statistics.median(ratios):.2f}× "
      f"(lowest {min(ratios):.2f}×, highest {max(ratios):.2f}×)")
print(f"run (processor)         {ingest:.2f} s  {n / ingest:,.0f} samples/s  (from process start to the last row durable)")
print(f"run / raw read          {raw / ingest:.2f}× (against the median raw read)")
print(f"  of which reading      {t_read - t4:.2f} s until the writer had polled every record; the rest is the last files rolling by age and writing")
print(f"on disk                 {size} bytes in {files} files: {size / n:.2f} bytes per row")
PY
