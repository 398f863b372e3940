#!/usr/bin/env bash
# usage: bash shell/wrap.sh
# Stage script of ./shell/run_wrap.sh: zip OUTPUT_DIR into output.zip (results, logs, system.json,
# plots, reports; never secrets or caches).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  tp_args "" "$@"
  tp_load_config --quiet
  tp_python -m evaluate.wrap "${OUTPUT_DIR}" --output "${TPRIMAT_ROOT}/output.zip"
}

main "$@"
