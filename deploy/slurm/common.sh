# Shared by prolog.sh and epilog.sh: settings and the tenant of a job.
#
# Settings (environment, or /etc/gpuledger/slurm.env):
#   GPULEDGER_COLLECTOR      the collector binary (default: gpuledger-collector on PATH)
#   GPULEDGER_POOL           the pool this node's GPUs belong to (required)
#   GPULEDGER_TENANT_MAP     file of `account=tenant` lines; an account not
#                            listed is its own tenant
#   GPULEDGER_KAFKA_BOOTSTRAP, GPULEDGER_TOPIC_PREFIX, GPULEDGER_CLUSTER
#                            passed through to the collector
# A hook must never fail a job because metering is down: errors are logged
# to syslog (or stderr) and the hook exits 0.
[ -f /etc/gpuledger/slurm.env ] && . /etc/gpuledger/slurm.env
collector=${GPULEDGER_COLLECTOR:-gpuledger-collector}

log() {
  if command -v logger >/dev/null 2>&1; then logger -t gpuledger-slurm "$*"; fi
  printf 'gpuledger-slurm: %s\n' "$*" >&2
}

tenant_of() {
  local account=$1 map=${GPULEDGER_TENANT_MAP:-}
  if [ -n "$map" ] && [ -f "$map" ]; then
    local line
    line=$(grep -m1 "^${account}=" "$map" || true)
    if [ -n "$line" ]; then printf '%s' "${line#*=}"; return; fi
  fi
  printf '%s' "$account"
}

# GPU UUIDs of the job's GPU indices (SLURM_JOB_GPUS="0,2"), when nvidia-smi can say.
device_args() {
  [ -n "${SLURM_JOB_GPUS:-}" ] && command -v nvidia-smi >/dev/null 2>&1 || return 0
  local index uuid
  nvidia-smi --query-gpu=index,uuid --format=csv,noheader 2>/dev/null | while IFS=', ' read -r index uuid; do
    case ",$SLURM_JOB_GPUS," in *",$index,"*) printf -- '--device\n%s\n' "$uuid" ;; esac
  done
}

common_args() {
  printf -- '%s\n' --pool "${GPULEDGER_POOL:?GPULEDGER_POOL is not set}" \
    --job-id "slurm-${SLURM_JOB_ID:?SLURM_JOB_ID is not set}" \
    --attempt "$(( ${SLURM_RESTART_COUNT:-0} + 1 ))" \
    --tenant "$(tenant_of "${SLURM_JOB_ACCOUNT:-${SLURM_JOB_USER:-unknown}}")"
  [ -n "${SLURM_JOB_USER:-}" ] && printf -- '%s\n' --user "$SLURM_JOB_USER"
  [ -n "${SLURMD_NODENAME:-}" ] && printf -- '%s\n' --node "$SLURMD_NODENAME"
  return 0
}
