#!/usr/bin/env bash
# Builds the processor to deploy optimised from a profile of its own hot
# paths (profile-guided optimisation, PGO):
#
# 1. the processor is built instrumented (the `production` profile plus
#    -Cprofile-generate);
# 2. the instrumented processor runs a training workload on the local
#    broker: `catch-up` of a simulated fleet's telemetry (40 nodes, 1,000,000
#    samples, produced to fresh topics that are deleted afterwards), and
#    `generate` then `fold` of a ledger (300 GPUs over 14 days, seed 7).
#    The inputs differ from the benchmarks' (deploy/bench/) in size, seed
#    and dates, so a benchmark does not measure its own training run;
# 3. llvm-profdata (rustup's `llvm-tools`, installed when missing) merges
#    the counts;
# 4. the processor is built again with -Cprofile-use.
#
#   deploy/build-pgo.sh        (needs the local broker: deploy/local/kafka.sh start)
#
# The binary lands in <target>/pgo-bin (CARGO_TARGET_DIR, or target/, is
# <target>); the builds use <target>/pgo, so the usual target folders keep
# what they hold. Only the processor is built this way: the collector's and
# the query service's benchmarks meet their goals with the `production`
# build. About 15 minutes on two cores; run again on the same inputs, it
# only checks the stamp in pgo-bin/.sources. The benchmarks take this
# binary with BENCH_PROFILE=pgo (deploy/bench/profile.sh).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
target=${CARGO_TARGET_DIR:-$repo/target}
pgo_target=$target/pgo
out=$target/pgo-bin
work=$repo/var/pgo
# The local broker (deploy/local/kafka.sh), which makes and drops the topics.
bootstrap=127.0.0.1:${GPULEDGER_KAFKA_PORT:-9092}
say() { printf 'build-pgo.sh: %s\n' "$*" >&2; }

# What the binary is made of: the sources of the processor and the crates
# it uses, the lock file and this training, committed or not.
inputs=(Cargo.toml Cargo.lock processor schemas common deploy/build-pgo.sh)
sources=$({ git ls-files -s -- "${inputs[@]}"; git diff HEAD -- "${inputs[@]}"
  git status --porcelain -- "${inputs[@]}"; } | sha1sum | cut -c1-40)
if [ -x "$out/gpuledger-processor" ] && [ "$(cat "$out/.sources" 2>/dev/null)" = "$sources" ]; then
  say "$out is built from these sources already"
  exit 0
fi

"$repo/deploy/local/kafka.sh" status >/dev/null ||
  { say "no broker answers on $bootstrap; run: deploy/local/kafka.sh start"; exit 1; }

host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
  say "installing rustup's llvm-tools (llvm-profdata)"
  rustup component add llvm-tools >&2
fi

# (With the processor, as the ingest benchmark builds them: the same
# packages unify the same features, and nothing is rebuilt twice.)
say "building the collector that produces the training fleet (production profile)"
cargo build --profile production -p gpuledger-processor -p gpuledger-collector >&2

rm -rf "$work"
mkdir -p "$work/counts"
say "building the instrumented processor"
RUSTFLAGS="-Cprofile-generate=$work/counts" CARGO_TARGET_DIR=$pgo_target \
  cargo build --profile production -p gpuledger-processor >&2
trained="$pgo_target/production/gpuledger-processor"

prefix="pgo-$(date +%s)-$$."
drop_topics() { "$repo/deploy/local/kafka.sh" drop "$prefix" || true; }
trap drop_topics EXIT
say "training: telemetry on ${prefix}gpuledger.telemetry"
GPULEDGER_TOPIC_PREFIX=$prefix "$repo/deploy/local/kafka.sh" topics
"$target/production/gpuledger-collector" --log-filter warn simulate --kafka-bootstrap "$bootstrap" \
  --topic-prefix "$prefix" --nodes 40 --gpus-per-node 2 --ticks 5000 \
  --start 2026-08-01T00:00:00Z --summary > "$work/produced.json"
"$trained" --log-filter warn catch-up --kafka-bootstrap "$bootstrap" --topic-prefix "$prefix" \
  --history-root "$work/history" --group-id "${prefix}catch-up" --flush-rows 100000 > "$work/catch-up.json"
say "training: a ledger of 300 GPUs over 14 days"
"$trained" --log-filter warn generate --history-root "$work/generated" --gpus 300 --days 14 \
  --start 2026-09-01 --seed 7 --ledger-only --ledger-ndjson "$work/ledger.ndjson" > "$work/generated.json"
"$trained" --log-filter warn fold --ledger "$work/ledger.ndjson" > "$work/fold.json"

"$profdata" merge -o "$work/processor.profdata" "$work/counts"
say "building the processor from the profile"
RUSTFLAGS="-Cprofile-use=$work/processor.profdata" CARGO_TARGET_DIR=$pgo_target \
  cargo build --profile production -p gpuledger-processor >&2

mkdir -p "$out"
cp "$pgo_target/production/gpuledger-processor" "$out/"
echo "$sources" > "$out/.sources"
rm -rf "$work/history" "$work/generated"
say "the processor is in $out"
