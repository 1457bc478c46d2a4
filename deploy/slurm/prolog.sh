#!/usr/bin/env bash
# Slurm Prolog: tells gpuledger a job attempt started on this node
# (JobEvent `started`, with the job's GPUs when nvidia-smi can name them).
# Install: Prolog=/etc/gpuledger/prolog.sh in slurm.conf. See common.sh for settings.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/common.sh"
mapfile -t args < <(common_args; device_args)
if ! "$collector" job start "${args[@]}" --source slurm-prolog >/dev/null; then
  log "could not record the start of job ${SLURM_JOB_ID:-?}"
fi
exit 0
