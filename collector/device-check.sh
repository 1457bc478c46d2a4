#!/usr/bin/env bash
# Runs the collector once against the real NVIDIA driver and checks that
# what it reports is plausible: at least one device, memory totals above
# zero, well-formed GPU-/MIG- uuids, and a MIG layout consistent with MIG
# mode (instances of a split GPU name their parent; slices within 1..max).
# Changes nothing on the GPU. Exit 0 when every check holds.
#
#   collector/device-check.sh [path/to/gpuledger-collector] [--nvml-lib PATH]
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${1:-}
if [ -z "$bin" ] || [ "${bin#--}" != "$bin" ]; then
  (cd "$repo" && cargo build -p gpuledger-collector --quiet)
  bin=${CARGO_TARGET_DIR:-$repo/target}/debug/gpuledger-collector
else
  shift
fi

echo "== nvidia-smi"
nvidia-smi -L || echo "(nvidia-smi not available)"
echo "== gpuledger-collector run --source nvml --once"
out=$("$bin" run --source nvml --node device-check --pool check --once --output json "$@")
printf '%s\n' "$out" | cut -c1-400
printf '%s\n' "$out" | python3 "$repo/collector/device_check.py"
echo "device check passed"
