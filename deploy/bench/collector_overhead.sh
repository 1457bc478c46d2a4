#!/usr/bin/env bash
# The collector's own cost on a node: 8 GPUs × 7 MIG instances (56 devices)
# sampled at 1 Hz from the fake NVML backend and delivered to the local
# broker, measured with /usr/bin/time -v over ROUNDS seconds (default 60).
# Prints CPU share of one core and peak RSS. Builds with the `bench`
# profile (release without LTO) unless BENCH_PROFILE says otherwise
# (deploy/bench/profile.sh).
#
#   deploy/bench/collector_overhead.sh [ROUNDS]
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rounds=${1:-60}
bootstrap=${GPULEDGER_KAFKA_BOOTSTRAP:-127.0.0.1:9092}
prefix="bench-collector-$(date +%s)."
cd "$repo"
. "$repo/deploy/bench/profile.sh"
bench_build gpuledger-collector
collector=$bin/gpuledger-collector
GPULEDGER_TOPIC_PREFIX=$prefix deploy/local/kafka.sh topics >&2
log=$(mktemp)
/usr/bin/time -v "$collector" run --source fake --fake-gpus 8 --fake-migs 7 --interval-ms 1000 \
  --rounds "$rounds" --node bench-node --pool h200 \
  --kafka-bootstrap "$bootstrap" --topic-prefix "$prefix" 2> "$log" >/dev/null
python3 - "$log" "$rounds" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
def field(name):
    m = re.search(rf"{re.escape(name)}: (.+)", text)
    return m.group(1).strip() if m else None
user, system = float(field("User time (seconds)")), float(field("System time (seconds)"))
wall = field("Elapsed (wall clock) time (h:mm:ss or m:ss)")
parts = [float(p) for p in wall.split(":")]
seconds = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
rss_kb = int(field("Maximum resident set size (kbytes)"))
print(f"rounds: {sys.argv[2]} (56 devices at 1 Hz, {56 * int(sys.argv[2])} samples)")
print(f"wall: {seconds:.1f} s, user: {user:.2f} s, system: {system:.2f} s")
print(f"CPU: {100 * (user + system) / seconds:.2f} % of one core")
print(f"peak RSS: {rss_kb / 1024:.1f} MiB")
PY
rm -f "$log"
