#!/usr/bin/env bash
# Benchmarks the ledger state machine alone (pure replay, issue 4):
#
# 1. `gpuledger-processor generate --ledger-only --ledger-ndjson` folds a
#    month of ledger for a large simulated fleet (admissions, starts, ends,
#    failures and retries, hourly clocks, two price books, a reservation per
#    pool, two tenants with budgets) and writes every event as NDJSON
#    (skipped when the file already holds the same generation);
# 2. `gpuledger-processor fold` parses the file, then times
#    `Ledger::apply` over every event on one core, and prints events/s and a
#    digest of the decisions; it runs BENCH_ROUNDS times (5), the digests
#    must agree, and the median and best fold are printed (this machine's
#    run-to-run spread is ±15 %).
#
#   deploy/bench/ledger_replay.sh [DIR]
#
# Environment: BENCH_GPUS (1000), BENCH_DAYS (30), BENCH_ROUNDS (5),
# BENCH_PROFILE (bench; see deploy/bench/profile.sh), CARGO_TARGET_DIR.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
gpus=${BENCH_GPUS:-1000}
days=${BENCH_DAYS:-30}
dir=${1:-$repo/var/bench/ledger}

. "$repo/deploy/bench/profile.sh"
bench_build gpuledger-processor

ledger=$dir/ledger.ndjson
marker="gpus=$gpus days=$days seed=1 $(git rev-parse HEAD:processor/src/generate)"
if [ "$(cat "$dir/.generated" 2>/dev/null)" != "$marker" ]; then
  rm -rf "$dir"
  mkdir -p "$dir"
  echo "generating the ledger of $gpus GPUs over $days days into $ledger" >&2
  /usr/bin/time -f "generate --ledger-only: %e s, peak RSS %M KiB" \
    "$bin/gpuledger-processor" generate --history-root "$dir/history" --gpus "$gpus" \
    --days "$days" --start 2026-11-01 --seed 1 --ledger-only --ledger-ndjson "$ledger" \
    > "$dir/.summary.json"
  echo "$marker" > "$dir/.generated"
fi
cat "$dir/.summary.json" >&2
echo "ledger: $(wc -l < "$ledger") events, $(du -b "$ledger" | cut -f1) bytes" >&2

rounds=${BENCH_ROUNDS:-5}
results=()
for run in $(seq 1 "$rounds"); do
  out=$(/usr/bin/time -f "fold run $run: %e s wall, %U s user, peak RSS %M KiB" \
    "$bin/gpuledger-processor" --log-filter warn fold --ledger "$ledger")
  echo "$out"
  results+=("$(echo "$out" | grep '^{')")
done
# The median and the best of the runs; every run must decide the same.
printf '%s\n' "${results[@]}" | python3 -c '
import json, statistics, sys
runs = [json.loads(line) for line in sys.stdin]
digests = {r["decisions_digest"] for r in runs}
if len(digests) != 1:
    sys.exit(f"the folds gave different decisions: {sorted(digests)}")
folds = [r["fold_seconds"] for r in runs]
events = runs[0]["events"]
median, best = statistics.median(folds), min(folds)
print(f"fold over {len(runs)} runs: median {median:.3f} s ({events / median:,.0f} events/s), "
      f"best {best:.3f} s ({events / best:,.0f} events/s); decisions digest {digests.pop()}")
'
