#!/usr/bin/env bash
# usage: ./shell/slurm.sh                 submit the configured matrix
#        ./shell/slurm.sh --follow JOBID  follow a submitted job until it ends (exit code: the job's)
# Multi-node benchmarks on Slurm, from a login node: one job that walks the whole benchmark matrix.
#
# ./shell/run_train.sh hands over to this script when LAUNCHER=slurm (or NNODES>1 and sbatch is on
# PATH). It validates the configuration, creates the run-set directory OUTPUT_DIR/<time>-<platform>/,
# writes the job script into it (every #SBATCH option, the whole resolved configuration, the network
# settings and the exact srun line), submits it, prints the job id and follows the job's output until
# the job ends; its exit code is the job's. One job for the matrix, not one per run: the queue wait
# and the container start are paid once, and every run of the matrix lands on the same nodes, so
# runs of one set compare on the same hardware.
#   DETACH=1   submit, print how to follow the job, return
#   DRY_RUN=1  write the job script and print the sbatch command; submit nothing
#   NNODES, SLURM_PARTITION, SLURM_ACCOUNT, SLURM_QOS, SLURM_TIME, SLURM_CONTAINER=none|pyxis,
#   SLURM_CONTAINER_IMAGE, SLURM_PENDING_TIMEOUT, NET_*: the job (config.env, or the environment)
# Waits are bounded: a job that cannot start (a pending reason that waiting cannot fix, or pending
# longer than SLURM_PENDING_TIMEOUT s) is cancelled, a controller that stops answering fails the
# command, and a node that dies ends the job (NODE_FAIL, never requeued); each says the scheduler's
# reason. Inside the job, shell/slurm_job.sh starts shell/train.sh once per node.
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

SLURM_POLL_S="${TPRIMAT_SLURM_POLL_S:-5}"  # seconds between two looks at the job
readonly SLURM_POLL_S
readonly SLURM_UNREACHABLE_S=300          # slurmctld silent this long: give up following
readonly SLURM_COMPLETING_S=120           # a job stuck in COMPLETING this long counts as ended
readonly SLURM_STEP_WAIT_S=600            # srun --wait: once one node's task ended, the others' grace
# Pending reasons that waiting cannot fix for the job as submitted (squeue(1), JOB REASON CODES;
# PartitionConfig: more nodes than the partition has).
readonly SLURM_HOPELESS='^(PartitionConfig|PartitionTimeLimit|BadConstraints|InvalidAccount|InvalidQOS|DependencyNeverSatisfied|QOSMax.*PerJob.*|AssocMax.*PerJob.*)$'
# Knobs the job does not take from the login node: each node sets its own rank, the batch step the
# rendezvous address; the launcher choice and DETACH concern only the login node.
readonly SLURM_LOCAL_KNOBS=' LAUNCHER DETACH NODE_RANK MASTER_ADDR RUN_SET_DIR '

# --- The job script (pure: reads only the exported configuration) --------------------------------

# A word as the job script's bash reads it back: bare when that is safe, quoted otherwise.
tp_slurm_quote() {
  if [[ "$1" =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
    printf '%s' "$1"
  else
    printf '%q' "$1"
  fi
}

# The sbatch options, one per line.
tp_slurm_sbatch_options() {
  printf '%s\n' "--job-name=tprimat-${PLATFORM}" "--nodes=${NNODES}" --ntasks-per-node=1
  [[ "${PLATFORM}" == cpu ]] || printf '%s\n' "--gpus-per-node=${GPUS_PER_NODE}"
  printf '%s\n' --exclusive --mem=0 "--time=${SLURM_TIME}" --no-requeue "--output=${RUN_SET_DIR}/slurm-%j.out"
  [[ -z "${SLURM_PARTITION}" ]] || printf '%s\n' "--partition=${SLURM_PARTITION}"
  [[ -z "${SLURM_ACCOUNT}" ]] || printf '%s\n' "--account=${SLURM_ACCOUNT}"
  [[ -z "${SLURM_QOS}" ]] || printf '%s\n' "--qos=${SLURM_QOS}"
}

# The image Pyxis starts on every node: SLURM_CONTAINER_IMAGE, else the squashfs file that
# `enroot import dockerd://tprimat:<platform>-<stack>` writes into the repository root.
tp_slurm_image() {
  echo "${SLURM_CONTAINER_IMAGE:-${TPRIMAT_ROOT}/tprimat+${PLATFORM}-${STACK_NAME}.sqsh}"
}

# The srun options that start one task per node, one per line. Each task gets every CPU of its
# node (srun gives one per task by default); a task that fails ends the step on every node.
tp_slurm_srun_options() {
  local dir mounts=""
  # shellcheck disable=SC2016  # expanded in the job, where Slurm sets it
  printf '%s\n' --ntasks-per-node=1 '--cpus-per-task="${SLURM_CPUS_ON_NODE}"' --kill-on-bad-exit=1 \
    "--wait=${SLURM_STEP_WAIT_S}" --label
  [[ "${SLURM_CONTAINER}" == pyxis ]] || return 0
  for dir in "${TPRIMAT_ROOT}" "${DATA_DIR}" "${OUTPUT_DIR}" "${HF_HOME}"; do
    [[ ",${mounts}," == *",${dir}:${dir},"* ]] || mounts+="${mounts:+,}${dir}:${dir}"
  done
  printf '%s\n' "--container-image=$(tp_slurm_image)" "--container-mounts=${mounts}" \
    "--container-workdir=${TPRIMAT_ROOT}" --no-container-mount-home
  # The image's own variables win over the job's in Pyxis; the network settings must not.
  [[ -z "${TPRIMAT_NET_NAMES}" ]] || printf '%s\n' "--container-env=${TPRIMAT_NET_NAMES}"
}

# The whole job script, on stdout.
tp_slurm_job_script() {
  local option key
  printf '#!/usr/bin/env bash\n'
  printf '# TPrimat: the benchmark matrix on %s nodes, one task per node. Written and submitted by\n' "${NNODES}"
  printf '# shell/slurm.sh; results land in this directory. To run again: ./shell/run_train.sh\n'
  while IFS= read -r option; do printf '#SBATCH %s\n' "${option}"; done < <(tp_slurm_sbatch_options)
  printf '\nset -euo pipefail\n\n# The configuration validated on the login node.\n'
  printf 'export RUN_SET_DIR=%s\n' "$(tp_slurm_quote "${RUN_SET_DIR}")"
  for key in $(tp_config_knobs); do
    [[ "${SLURM_LOCAL_KNOBS}" != *" ${key} "* && -v "${key}" ]] || continue
    printf 'export %s=%s\n' "${key}" "$(tp_slurm_quote "${!key}")"
  done
  printf 'unset LAUNCHER  # the nodes run the matrix themselves\n'
  printf '\n# Multi-node network settings of %s (utils/machine/netenv.py).\n' "${PLATFORM}"
  printf '%s\n' "${TPRIMAT_NET_EXPORTS:-# none: the collective library chooses}"
  printf '\n# MASTER_ADDR: the first node'\''s address (slurm_job.sh); then the same matrix on every node.\n'
  printf 'source %s\ntp_job_prepare\n' "$(tp_slurm_quote "${TPRIMAT_ROOT}/shell/slurm_job.sh")"
  printf 'srun'
  while IFS= read -r option; do
    # shellcheck disable=SC2016  # the one option the job expands itself
    [[ "${option}" == '--cpus-per-task="${SLURM_CPUS_ON_NODE}"' ]] || option="$(tp_slurm_quote "${option}")"
    printf ' \\\n  %s' "${option}"
  done < <(tp_slurm_srun_options)
  printf ' \\\n  bash %s node %s || tp_job_failed "$?"\n' "$(tp_slurm_quote "${TPRIMAT_ROOT}/shell/slurm_job.sh")" \
    "$([[ "${SLURM_CONTAINER}" == pyxis ]] && echo pyxis || echo host)"
}

# --- Checks before anything is submitted --------------------------------------------------------

tp_slurm_check() {
  case "${SLURM_CONTAINER}" in
    none)
      [[ -n "${TPRIMAT_PYTHON:-}" ]] || tp_ensure_venv requirements/host.txt ;;
    pyxis)
      local image
      image="$(tp_slurm_image)"
      if [[ "${image}" == /* && ! -f "${image}" ]]; then
        tp_die 2 "SLURM_CONTAINER=pyxis: no image ${image}; create it once with: enroot import -o ${image} dockerd://$(tp_image "${PLATFORM}") (after ./shell/build.sh), or set SLURM_CONTAINER_IMAGE"
      fi ;;
    *) tp_die 2 "SLURM_CONTAINER=${SLURM_CONTAINER}: not one of none, pyxis" ;;
  esac
  [[ "${RUNTIME:-auto}" != docker ]] \
    || tp_die 2 "RUNTIME=docker: Slurm jobs do not run Docker; use SLURM_CONTAINER=pyxis (the image through Enroot) or SLURM_CONTAINER=none, and unset RUNTIME"
  [[ "${OUTPUT_DIR}${TPRIMAT_ROOT}" != *[[:space:]]* ]] \
    || tp_die 2 "OUTPUT_DIR=${OUTPUT_DIR} or the repository path contains a space; Slurm's #SBATCH lines cannot hold it: choose a path without spaces"
  if [[ "${DRY_RUN}" != 1 ]]; then
    command -v sbatch >/dev/null 2>&1 \
      || tp_die 2 "LAUNCHER=slurm: no sbatch on PATH; run this on a Slurm login node, or start one ./shell/run_train.sh per node by hand (see the README)"
  fi
}

# A new, empty run-set directory, named and claimed by utils.runset as every run set is (nothing is
# overwritten; a name taken in the same second gets -2, -3).
tp_slurm_run_set() {
  (cd "${TPRIMAT_ROOT}" && "$(tp_host_python)" -m utils.runset "${OUTPUT_DIR}" "${PLATFORM}")
}

# --- Following a job ----------------------------------------------------------------------------

# `scontrol show job -o` of the job as KEY=value words; empty when the controller does not answer.
# A job the controller does not know (never submitted, or ended longer ago than its MinJobAge) stops.
tp_slurm_job_fields() {
  local answer
  if answer="$(scontrol show job -o "$1" 2>&1)"; then
    echo "${answer}"
  elif [[ "${answer}" == *"Invalid job id"* ]]; then
    tp_die 1 "job $1: Slurm does not know it (${answer}); a finished job is forgotten after MinJobAge; its output is in the run set's slurm-$1.out"
  fi
}

# One field of the job record given in $1.
tp_slurm_field() {
  local word
  for word in $1; do
    if [[ "${word}" == "$2="* ]]; then
      echo "${word#*=}"
      return 0
    fi
  done
}

# Print what was appended to FILE since byte TP_SLURM_SHOWN (then advanced to the end).
TP_SLURM_SHOWN=0
tp_slurm_print_new() {
  local file="$1" size
  [[ -f "${file}" ]] || return 0
  size="$(stat -c %s "${file}")"
  if ((size > TP_SLURM_SHOWN)); then
    tail -c "+$((TP_SLURM_SHOWN + 1))" "${file}" | head -c "$((size - TP_SLURM_SHOWN))"
    TP_SLURM_SHOWN="${size}"
  fi
}

# The exit code of run_train.sh for a finished job: the batch script's, else 128+signal, else 1
# when Slurm ended the job itself (time limit, node failure, cancellation).
tp_slurm_exit_code() {
  local state="$1" code="$2" status signal
  status="${code%%:*}"
  signal="${code##*:}"
  if ((status != 0)); then
    echo "${status}"
  elif ((signal != 0)); then
    echo "$((128 + signal))"
  elif [[ "${state}" == COMPLETED ]]; then
    echo 0
  else
    echo 1
  fi
}

# Follow JOBID: its output as it grows, its state changes; return the job's exit code.
tp_slurm_follow() {
  local job="$1" fields state reason last="" out="" pending_since silent_since completing_since="" now
  pending_since="$(date +%s)"
  silent_since="${pending_since}"
  while true; do
    now="$(date +%s)"
    fields="$(tp_slurm_job_fields "${job}")" || exit
    if [[ -z "${fields}" ]]; then
      ((now - silent_since < SLURM_UNREACHABLE_S)) \
        || tp_die 1 "job ${job}: slurmctld has not answered for ${SLURM_UNREACHABLE_S} s (scontrol show job ${job} fails); the job may still run: check with squeue -j ${job}"
      sleep "${SLURM_POLL_S}"
      continue
    fi
    silent_since="${now}"
    state="$(tp_slurm_field "${fields}" JobState)"
    reason="$(tp_slurm_field "${fields}" Reason)"
    [[ "${reason}" != None ]] || reason=""
    [[ -n "${out}" ]] || out="$(tp_slurm_field "${fields}" StdOut)"
    [[ -z "${out}" ]] || tp_slurm_print_new "${out}"
    if [[ "${state}/${reason}" != "${last}" && "${state}" =~ ^(PENDING|RUNNING|SUSPENDED|REQUEUED)$ ]]; then
      tp_log "job ${job}: ${state}${reason:+ (${reason})}$([[ "${state}" == RUNNING ]] && echo " on $(tp_slurm_field "${fields}" NodeList)")"
    fi
    last="${state}/${reason}"
    case "${state}" in
      PENDING | REQUEUED | REQUEUE_HOLD | REQUEUE_FED | SUSPENDED)
        if [[ "${state}" == PENDING && "${reason}" =~ ${SLURM_HOPELESS} ]]; then
          tp_slurm_cancel "${job}" "it can never start as submitted: the scheduler says ${reason}"
        elif ((now - pending_since >= SLURM_PENDING_TIMEOUT)); then
          tp_slurm_cancel "${job}" "still ${state} (${reason}) after ${SLURM_PENDING_TIMEOUT} s (SLURM_PENDING_TIMEOUT)"
        fi ;;
      CONFIGURING | RUNNING | RESIZING | SIGNALING | STAGE_OUT)
        pending_since="${now}" ;;
      COMPLETING)
        completing_since="${completing_since:-${now}}"
        ((now - completing_since < SLURM_COMPLETING_S)) || break ;;
      *) break ;;
    esac
    sleep "${SLURM_POLL_S}"
  done
  [[ -z "${out}" ]] || tp_slurm_print_new "${out}"
  tp_slurm_finish "${job}" "${fields}" "${out}"
}

# Report how the job ended and return its exit code.
tp_slurm_finish() {
  local job="$1" fields="$2" out="$3" state reason code
  state="$(tp_slurm_field "${fields}" JobState)"
  reason="$(tp_slurm_field "${fields}" Reason)"
  [[ "${reason}" != None ]] || reason=""
  code="$(tp_slurm_exit_code "${state}" "$(tp_slurm_field "${fields}" ExitCode)")"
  if [[ -n "${out}" && ! -f "${out}" ]]; then
    tp_warn "job ${job} wrote ${out}, which this machine cannot see: OUTPUT_DIR must be on a filesystem shared by the login and compute nodes"
  fi
  if [[ "${state}" == COMPLETED && "${code}" == 0 ]]; then
    tp_log "job ${job}: COMPLETED"
  else
    tp_log "job ${job}: ${state}${reason:+ (${reason})}, exit code ${code}"
  fi
  return "${code}"
}

# Cancel a job we submitted and stop with the reason.
tp_slurm_cancel() {
  local job="$1" why="$2"
  scancel "${job}" 2>/dev/null || true
  tp_die 1 "job ${job} cancelled: ${why}"
}

# --- Main ---------------------------------------------------------------------------------------

tp_slurm_submit() {
  local script="$1" reply job
  reply="$(sbatch --parsable "${script}" 2>&1)" || tp_die 1 "sbatch refused the job: ${reply}"
  job="${reply%%;*}"
  [[ "${job}" =~ ^[0-9]+$ ]] || tp_die 1 "sbatch answered '${reply}' instead of a job id"
  echo "${job}"
}

main() {
  tp_args "--follow=" "$@"
  if (($# > 0)); then
    local job="${2:-${1#--follow=}}"  # --follow JOBID or --follow=JOBID
    [[ "${job}" =~ ^[0-9]+$ ]] || tp_die 2 "--follow ${job}: not a Slurm job id; usage: shell/slurm.sh --follow JOBID"
    LAUNCHER=slurm tp_load_config --quiet
    trap 'tp_die 130 "stopped following; job ${job} goes on (scancel ${job} stops it)"' INT
    tp_slurm_follow "${job}"
    return
  fi
  export LAUNCHER=slurm  # the login node is not a compute node: its own GPUs do not constrain PLATFORM
  tp_load_config
  tp_slurm_check
  local RUN_SET_DIR TPRIMAT_NET_EXPORTS TPRIMAT_NET_NAMES
  RUN_SET_DIR="$(tp_slurm_run_set)"
  TPRIMAT_NET_EXPORTS="$(cd "${TPRIMAT_ROOT}" && "$(tp_host_python)" -m utils.machine.netenv "${PLATFORM}")"
  TPRIMAT_NET_NAMES="$(sed -n 's/^export \([A-Z0-9_]*\)=.*/\1/p' <<<"${TPRIMAT_NET_EXPORTS}" | paste -sd, -)"
  local script="${RUN_SET_DIR}/job.sbatch" job
  tp_slurm_job_script >"${script}.tmp"
  mv "${script}.tmp" "${script}"
  tp_log "job script: ${script}"
  if [[ "${DRY_RUN}" == 1 ]]; then
    tp_log "dry run: would submit: sbatch --parsable ${script}"
    return 0
  fi
  job="$(tp_slurm_submit "${script}")"
  tp_log "submitted Slurm job ${job}: ${NNODES} nodes x ${GPUS_PER_NODE} $([[ "${PLATFORM}" == cpu ]] && echo workers || echo GPUs), results in ${RUN_SET_DIR}"
  echo "${job}"
  if [[ "${DETACH}" == 1 ]]; then
    tp_log "detached; follow it: ./shell/slurm.sh --follow ${job}    stop it: scancel ${job}"
    return 0
  fi
  trap 'scancel "${job}" 2>/dev/null; tp_die 130 "interrupted: cancelled job ${job}"' INT TERM
  tp_slurm_follow "${job}"
}

main "$@"
