#!/usr/bin/env bash
# usage: ./shell/run_wrap.sh
# Pack OUTPUT_DIR into output.zip in the repository root, to take home: results, logs, system.json,
# plots and reports; never secrets, caches or environments. It takes no arguments; OUTPUT_DIR comes
# from config.env or the environment. The host runtime builds .venv with Python 3.12, or the interpreter
# named by TPRIMAT_HOST_PYTHON.
# Exit: 0 written, 1 failed, 2 bad input, 128+signal stopped (130 Ctrl-C).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
tp_args "" "$@"
tp_run_stage wrap
