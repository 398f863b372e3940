#!/usr/bin/env bash
# usage: bash shell/train.sh
# Stage script of ./shell/run_train.sh: the benchmark matrix (strategy x framework x model x repeat)
# in the chosen runtime. Prints the run list, checks the data, probes the system, runs each run
# into its own directory of a new run set, then summarises, validates and compares.
# DRY_RUN=1: every run's command and generated configuration, no training.
# Multi-node (NODE_RANK/NNODES): every node walks the same matrix; node 0 probes, prepares the CPU
# sample data when it is missing (the others wait for it) and writes the summary and report.
# Exit: 0 every run ok, 1 a run failed, 2 bad configuration or missing data, 128+signal stopped (130 Ctrl-C).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CHILD=""         # process id (and process group) of the run in progress
RUNNING=""       # its name
STOPPED=""       # the first stop signal received (HUP, INT, QUIT or TERM)
STOPPED_DURING="" # the run it arrived during, if any

# A stop signal (Ctrl-C, an SSH hangup, docker stop, scancel, ./shell/run_train.sh stopping): pass
# it to the run in progress, which records the stop. The signal that reached this script's group
# reached its other children already; a second one is passed on too (the launcher then kills at once).
on_signal() {
  [[ -n "${STOPPED}" ]] || { STOPPED="$1"; STOPPED_DURING="${RUNNING}"; }
  [[ -z "${CHILD}" ]] || kill -"$1" -- "-${CHILD}" 2>/dev/null || true
}

# After a stop nothing more starts: one line, and the exit status 128+signal.
end_if_stopped() {
  [[ -n "${STOPPED}" ]] || return 0
  tp_warn "interrupted by SIG${STOPPED}${STOPPED_DURING:+ during ${STOPPED_DURING}}: nothing more starts${RUN_SET_DIR:+; what finished is in ${RUN_SET_DIR} (python3 -m evaluate.validate ${RUN_SET_DIR})}" || true
  exit "$((128 + $(kill -l "${STOPPED}")))"
}

# Run one run in a process group of its own and wait for it, until it has ended whatever signals come.
run_child() {
  local rc=0
  set -m
  "$@" </dev/null &
  CHILD=$!
  set +m
  tp_wait_ended "${CHILD}" || rc=$?
  CHILD=""
  return "${rc}"
}

# Data for every model, verified; on the CPU with the bundled sample corpus, prepare it here (in a
# multi-node run only node 0 does; the other nodes wait for it).
check_data() {
  tp_python -m train.plan --check-data && return 0
  end_if_stopped
  if [[ "${PLATFORM}" == cpu && "${DATASET}" == sample && "${DRY_RUN}" != 1 && "${NODE_RANK}" != 0 ]]; then
    wait_for_sample_data
  elif [[ "${PLATFORM}" == cpu && "${DATASET}" == sample && "${DRY_RUN}" != 1 ]]; then
    tp_log "preparing the bundled sample corpus (DATASET=sample on the CPU)"
    bash "${TPRIMAT_ROOT}/shell/data.sh" || { end_if_stopped; tp_die 1 "preparing the sample data failed (see above)"; }
    tp_python -m train.plan --check-data || tp_die 1 "the sample data is still missing after shell/data.sh"
  elif [[ "${DRY_RUN}" == 1 ]]; then
    tp_warn "dry run: a real run would stop here until the data is prepared with ./shell/run_data.sh"
  elif [[ "${MOCK_DATA}" != 1 ]]; then
    tp_die 2 "prepare the data first: ./shell/run_data.sh"
  fi
}

# Nodes other than 0: wait, for at most TPRIMAT_DATA_WAIT_S seconds (default 1800), until node 0 has
# prepared the sample corpus and data.verify has written its manifests into the shared DATA_DIR.
wait_for_sample_data() {
  local limit="${TPRIMAT_DATA_WAIT_S:-1800}" deadline
  [[ "${limit}" =~ ^[0-9]+$ ]] || tp_die 2 "TPRIMAT_DATA_WAIT_S=${limit}: must be a number of seconds"
  deadline=$((SECONDS + limit))
  tp_log "node ${NODE_RANK}: waiting up to ${limit} s for node 0 to prepare the sample corpus in ${DATA_DIR}"
  until tp_python -m train.plan --check-data 2>/dev/null; do
    ((SECONDS < deadline)) \
      || tp_die 1 "node ${NODE_RANK}: node 0's verified sample data did not appear in ${DATA_DIR} within ${limit} s; DATA_DIR must be on a filesystem every node shares (or prepare the data on every node first: ./shell/run_data.sh)"
    sleep 5
    end_if_stopped
  done
  tp_log "node ${NODE_RANK}: the sample corpus is ready"
}

# A new run-set directory (RUN_SET_DIR when a launcher such as Slurm created it for every node). The
# name is claimed by mkdir itself, which fails on an existing directory: two commands started in the
# same second never share a run set.
make_run_set() {
  local dir="${RUN_SET_DIR:-}" base n=1 why
  if [[ -n "${dir}" ]]; then
    why="$(mkdir -p -- "${dir}" 2>&1)" || tp_die 2 "RUN_SET_DIR=${dir}: cannot create the run set: ${why##*: }"
  else
    why="$(mkdir -p -- "${OUTPUT_DIR}" 2>&1)" && [[ -d "${OUTPUT_DIR}" ]] \
      || tp_die 2 "OUTPUT_DIR=${OUTPUT_DIR}: cannot create the run set there: ${why##*: }"
    base="${OUTPUT_DIR}/$(date +%Y%m%d-%H%M%S)-${PLATFORM}"
    dir="${base}"
    until why="$(mkdir -- "${dir}" 2>&1)"; do
      [[ -e "${dir}" ]] || tp_die 2 "OUTPUT_DIR=${OUTPUT_DIR}: cannot create the run set there: ${why##*: }"
      n=$((n + 1))
      dir="${base}-${n}"
    done
  fi
  (cd "${dir}" && pwd)
}

# DRY_RUN in a container: how to start the same run from the host.
print_container_command() {
  local script="$1"
  shift
  [[ "${TPRIMAT_RUNTIME:-}" == docker ]] || return 0
  tp_log "from the host: $(tp_docker_command_line "${PLATFORM}" "tprimat-train" bash "${script}" "$@")"
}

main() {
  tp_args "" "$@"
  tp_load_config --quiet
  local sig
  for sig in "${TP_STOP_SIGNALS[@]}"; do
    # shellcheck disable=SC2064  # the signal's name is fixed now
    trap "on_signal ${sig}" "${sig}"
  done
  local -a runs=()
  tp_python -m train.plan
  mapfile -t runs < <(tp_python -m train.plan --tsv)
  ((${#runs[@]} > 0)) || tp_die 2 "the run list is empty; check FRAMEWORK and MODELS"
  check_data
  end_if_stopped

  local run_set
  run_set="$(make_run_set)"
  export RUN_SET_DIR="${run_set}"
  tp_log "run set: ${run_set}"
  if [[ "${NODE_RANK}" == 0 ]]; then
    tp_python -m evaluate.probe -o "${run_set}/system.json" \
      || { end_if_stopped; tp_warn "the system probe failed: results will have no system description"; }
  fi

  local line name framework model strategy repeat script index=0 rc failed=0
  local -a names=()
  for line in "${runs[@]}"; do
    [[ -z "${STOPPED}" ]] || break
    IFS=$'\t' read -r name framework model strategy repeat <<<"${line}"
    index=$((index + 1))
    names+=("${name}")
    script="train/train_${PLATFORM}_${framework}_${model}.sh"
    [[ "${strategy}" == custom ]] && strategy=""
    tp_log "run ${index}/${#runs[@]}: ${name}"
    [[ "${DRY_RUN}" == 1 ]] && print_container_command "${script}" --run-dir "${run_set}/${name}" --repeat "${repeat}"
    rc=0
    RUNNING="${name}"
    STRATEGY="${strategy}" run_child bash "${TPRIMAT_ROOT}/${script}" --run-dir "${run_set}/${name}" \
      --repeat "${repeat}" || rc=$?
    RUNNING=""
    ((rc == 0)) || failed=1
  done

  if [[ -n "${STOPPED}" && "${NODE_RANK}" == 0 ]] && ((${#names[@]} > 0)); then
    tp_python -m train.summary "${run_set}" "${names[@]}" || true
  fi
  end_if_stopped
  [[ "${NODE_RANK}" == 0 ]] || { tp_log "node ${NODE_RANK}: done; node 0 writes the summary"; return "${failed}"; }
  tp_python -m train.summary "${run_set}" "${names[@]}" || failed=1
  end_if_stopped
  if [[ "${DRY_RUN}" == 1 ]]; then
    tp_log "dry run: commands and generated configurations are in ${run_set}; nothing was trained"
    return "${failed}"
  fi
  tp_python -m evaluate.validate "${run_set}" || { end_if_stopped; tp_warn "validation found problems (listed above)"; }
  end_if_stopped
  tp_python -m evaluate.compare "${run_set}" -o "${run_set}" || { end_if_stopped; tp_warn "the comparison failed"; failed=1; }
  end_if_stopped
  tp_log "results: ${run_set}"
  return "${failed}"
}

main "$@"
