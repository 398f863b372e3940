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

# The configuration is validated here, in the runtime, and the matrix itself is python3 -m train.matrix:
# it becomes this process, so every stop signal meant for the stage reaches it. The tools it starts use
# the same Python.
tp_args "" "$@"
tp_load_config --quiet
TPRIMAT_PYTHON="$(tp_python_bin)"
export TPRIMAT_PYTHON
cd "${TPRIMAT_ROOT}"
exec "${TPRIMAT_PYTHON}" -m train.matrix
