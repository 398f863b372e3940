#!/usr/bin/env bash
# usage: bash train/launch.sh PLATFORM FRAMEWORK MODEL [--run-dir DIR] [--repeat N]
# One training run by hand, by the one launcher behind every train/train_<platform>_<framework>_<model>.sh
# (python3 -m train.launch.run, which the matrix of ./shell/run_train.sh starts on each request it planned):
# the configuration is loaded and validated once, the data checked, the run's request planned, its command
# and generated configuration written into its directory, the framework run with its console in train.log,
# and result.json written and checked against the request.
#   --run-dir DIR   the run's directory (default: a new one under RUN_SET_DIR, or a new run set in OUTPUT_DIR)
#   --repeat N      the repeat number of this run (1-based), as ./shell/run_train.sh counts them
# Every setting comes from config.env and the environment; for one run these matter most:
#   STRATEGY    one named layout (default: TP, PP, DP, GA)
#   DRY_RUN=1   write config.json, launch.json and the framework's configuration and print the command;
#               train nothing
#   MOCK_DATA=1 synthetic tokens; otherwise the data must be prepared and verified (./shell/run_data.sh)
#   NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT   one node of a multi-node run
#   PRIMUS_PATH the Primus checkout for prim (default: the stack's release's, train/prim/releases.py)
# Exit: 0 ok, 1 the run failed, 2 bad input or data not prepared, 128+signal stopped (129 SIGHUP, 130 Ctrl-C,
# 131 SIGQUIT, 143 SIGTERM).
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../shell/lib.sh"

# A wrapper's usage: its own header, then what every run shares (this launcher's, after its usage line).
usage() {
  local wrapper="${TPRIMAT_ROOT}/train/train_${1:-}_${2:-}_${3:-}.sh"
  if [[ -f "${wrapper}" ]]; then
    tp_usage "${wrapper}"
    tp_usage "$0" | tail -n +2
  else
    tp_usage "$0"
  fi
}

main() {
  if tp_help_asked "$@"; then
    usage "$@"
    return 0
  fi
  (($# >= 3)) || tp_die 2 "expected PLATFORM FRAMEWORK MODEL [--run-dir DIR] [--repeat N], got '$*' (--help shows the usage)"
  local platform="$1" framework="$2" model="$3"
  shift 3
  tp_args "--run-dir= --repeat=" "$@"
  # The launcher loads and validates the configuration itself, once, and exports it to what it starts. The
  # detection is asked afresh: an exported one may come from another machine (a Slurm login node's environment).
  unset TPRIMAT_DETECTED_PLATFORM TPRIMAT_DETECTED_GPUS
  # A stop signal reaches the launcher too (one process group): this shell waits for it to record the stop.
  trap : "${TP_STOP_SIGNALS[@]}"
  tp_python -m train.launch.run --platform "${platform}" --framework "${framework}" --model "${model}" "$@"
}

main "$@"
