#!/usr/bin/env bash
# The entry points' half of TPrimat's shared shell library (sourced by shell/lib.sh, never run):
# run_<stage>.sh -> shell/<stage>.sh in the chosen runtime, supervised so that every stop signal ends
# everything the command started.

# Before preparing data on a GPU platform: a gated model's tokenizer (utils.spec.models says which) needs
# HF_TOKEN, unless it is already prepared or an offline fallback tokenizer is explicitly allowed.
tp_check_data_secrets() {
  [[ "${PLATFORM}" != cpu && "${ALLOW_FALLBACK_TOKENIZER}" != 1 ]] || return 0
  local gated key repo name tokenizer
  gated="$(cd "${TPRIMAT_ROOT}" && "$(tp_host_python)" -m utils.spec.models gated "${MODELS}")" || exit 2
  while IFS=$'\t' read -r key repo name; do
    [[ -n "${key}" ]] || continue
    tokenizer="$(cd "${TPRIMAT_ROOT}" && "$(tp_host_python)" -m utils.datafiles layout "${DATA_DIR}" "${DATASET}" "${key}")" \
      || exit 2
    [[ ! -f "${tokenizer%%$'\n'*}/tokenizer.json" ]] || continue
    tp_require_token "the ${name} tokenizer (${repo}, gated)"
  done <<<"${gated}"
}

# Multi-node training from a login node goes to Slurm (shell/slurm.sh): LAUNCHER=slurm, or auto with
# NNODES>1 and sbatch on PATH, as utils.config resolves it (environment over config.env).
tp_slurm_wanted() {
  local mode
  mode="$(cd "${TPRIMAT_ROOT}" && "$(tp_host_python)" -m utils.config get LAUNCH_MODE --quiet)" || exit 2
  [[ "${mode}" == slurm ]]
}

# The signals that stop a command, one trap each: hangup (an SSH disconnect), Ctrl-C, Ctrl-\, kill
# (utils.cli.STOP_SIGNALS are the same four, for the Python side).
TP_STOP_SIGNALS=(HUP INT QUIT TERM)

# tp_wait_ended PID: wait until the background job PID has ended, however many trapped signals cut a
# wait short; returns its exit status.
tp_wait_ended() {
  local rc
  while true; do
    rc=0
    wait "$1" || rc=$?
    kill -0 "$1" 2>/dev/null || return "${rc}"
  done
}

# tp_supervise COMMAND...: run COMMAND (a program, or a function of this library) in a process group
# of its own, with no terminal input, and wait for it. A stop signal to this shell goes to that whole
# group, and the shell waits until COMMAND has ended (so it records the stop, and nothing prints after
# the prompt) and exits 128+signal, saying so in one line unless COMMAND did. A program also gets SIGTERM when
# this shell dies, even by SIGKILL (PR_SET_PDEATHSIG); a function's subshell only defers the signals
# until what it runs, which got them from the group, has ended.
tp_supervise() {
  local rc sig
  TP_STOPPED=""
  for sig in "${TP_STOP_SIGNALS[@]}"; do
    # shellcheck disable=SC2064  # the signal's name is fixed now, the child's group when it arrives
    trap "tp_forward_stop ${sig}" "${sig}"
  done
  set -m  # job control: the background command leads a process group of its own
  if declare -F "$1" >/dev/null; then
    (trap : "${TP_STOP_SIGNALS[@]}"; "$@") </dev/null &
  elif command -v setpriv >/dev/null; then
    setpriv --pdeathsig TERM -- "$@" </dev/null &
  else
    tp_warn "setpriv (util-linux) is missing: a SIGKILL of this command would not reach what it starts"
    "$@" </dev/null &
  fi
  TP_CHILD=$!
  set +m
  rc=0
  tp_wait_ended "${TP_CHILD}" || rc=$?
  [[ -n "${TP_STOPPED}" ]] || return "${rc}"
  local code=$((128 + $(kill -l "${TP_STOPPED}")))
  trap '' PIPE  # after a hangup the terminal may be gone: the exit status still says what happened
  # a command that exits 128+signal has said why itself
  ((rc == code)) || tp_log "interrupted by SIG${TP_STOPPED}: everything it started has ended" || true
  exit "${code}"
}

# A stop signal: pass it to the supervised command's process group (a second Ctrl-C too: it hurries).
tp_forward_stop() {
  TP_STOPPED="${TP_STOPPED:-$1}"
  kill -"$1" -- "-${TP_CHILD}" 2>/dev/null || true
}

tp_run_stage() {
  local stage="$1"
  shift
  if [[ "${stage}" == train ]] && tp_slurm_wanted; then
    exec bash "${TPRIMAT_ROOT}/shell/slurm.sh" "$@"
  fi
  tp_load_config
  [[ "${stage}" != data ]] || tp_check_data_secrets
  local runtime
  runtime="$(tp_choose_runtime "${PLATFORM}")"
  case "${runtime}" in
    docker)
      [[ "${stage}" != train ]] || tp_warn_without_rdma
      if [[ "${stage}" == train && "${DRY_RUN}" == 1 ]]; then
        tp_supervise tp_docker_dry_run "${stage}" "$@"
      else
        tp_build_image "${PLATFORM}"
        tp_supervise tp_docker_run "${PLATFORM}" "tprimat-${stage}" bash "shell/${stage}.sh" "$@"
      fi ;;
    host)
      if [[ "${stage}" == train && "${PLATFORM}" != cpu ]]; then
        tp_require_gpu_stack
      elif [[ -z "${TPRIMAT_PYTHON:-}" ]]; then
        tp_ensure_venv requirements/host.txt
      fi
      TPRIMAT_RUNTIME=host tp_supervise bash "${TPRIMAT_ROOT}/shell/${stage}.sh" "$@" ;;
  esac
}
