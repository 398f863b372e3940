#!/usr/bin/env bash
# Zip OUTPUT_DIR into output.zip (results, logs, system.json, plots, reports; never secrets or caches).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  tp_load_config --quiet
  tp_python -m evaluate.wrap "${OUTPUT_DIR}" --output "${TPRIMAT_ROOT}/output.zip" "$@"
}

main "$@"
