#!/usr/bin/env bash
# usage: ./shell/run_train.sh
# The benchmark: every framework x model (x strategy x repeat) of this machine's platform, each run in
# a new run set under OUTPUT_DIR, then a summary table, evaluate.validate, compare.png and report.md.
# It takes no arguments: every setting comes from config.env, and an environment variable of the same
# name overrides it (python3 -m utils.config check prints what is in effect), e.g.
#   FRAMEWORK=mega MODELS=llama ./shell/run_train.sh
# The settings that matter most:
#   PLATFORM=amd|nvd|cpu   forced platform (default: detected)
#   RUNTIME=docker|host    forced runtime (default: docker on a GPU node with a Docker engine, else host)
#   FRAMEWORK              mega|prim|nemo|mbridge|fsdp|autotp|torchtitan|all (or a comma list)
#   MODELS                 llama|qwen|llama70b|mistral|llama32|qwen3moe|gptoss (a comma list)
#   MODEL_LAYERS=N         a proxy of each model with its first N layers (e.g. llama70b on one node)
#   COMPILE, SAC_FREQ...   the torch-native frameworks' knobs (fsdp, autotp, torchtitan; README: compatibility table)
#   STRATEGY               a named parallelism layout, a comma list or all (default: TP, PP, DP, GA)
#   DRY_RUN=1              print the run list and each run's command; build, pull and train nothing
#   DETACH=1               run in a named background container (tprimat-train)
#   MOCK_DATA=1            synthetic tokens; otherwise ./shell/run_data.sh must have prepared the data
#   NNODES>1, LAUNCHER     multi-node: one Slurm job (sbatch on PATH), or one run_train.sh per node
# The host runtime builds .venv from requirements/host.txt with Python 3.12, or the interpreter named by
# TPRIMAT_HOST_PYTHON (it says so when that Python is too old); TPRIMAT_PYTHON uses an existing environment.
# On GPUs the host runtime trains only with a Python that sees them and the vendor's stack (TPRIMAT_PYTHON,
# or .venv as it is): otherwise it stops in one line naming what is missing.
# Exit: 0 every run ok, 1 a run failed, 2 bad input or missing data, 128+signal stopped (129 SIGHUP,
# 130 Ctrl-C, 131 SIGQUIT, 143 SIGTERM): a stop ends everything the command started, records the run in
# progress as interrupted, and nothing starts after it.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
tp_args "" "$@"
tp_run_stage train
