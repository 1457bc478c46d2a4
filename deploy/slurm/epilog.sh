#!/usr/bin/env bash
# Slurm Epilog: tells gpuledger a job attempt ended. The state comes from
# the exit status (SLURM_JOB_EXIT_CODE2 = CODE:SIGNAL, else SLURM_JOB_EXIT_CODE):
#   0:0 → completed;  0:SIGNAL (scancel, time limit) → cancelled;  else → failed.
# Install: Epilog=/etc/gpuledger/epilog.sh in slurm.conf. See common.sh for settings.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/common.sh"
exit_status=${SLURM_JOB_EXIT_CODE2:-${SLURM_JOB_EXIT_CODE:-0}}
mapfile -t args < <(common_args)
if ! "$collector" job end "${args[@]}" --exit "$exit_status" --source slurm-epilog >/dev/null; then
  log "could not record the end of job ${SLURM_JOB_ID:-?}"
fi
exit 0
