#!/usr/bin/env bash
# usage: ./shell/run_data.sh
# Prepare DATASET for every model of MODELS in DATA_DIR, in the chosen runtime (docker or host):
# data.fetch -> data.clean -> data.encode -> data.verify, into Megatron .bin/.idx plus a verified
# manifest, which training requires. A stage whose outputs are complete and made from the same inputs
# is skipped. It takes no arguments; the settings that matter (config.env, or the environment):
#   DATASET, DATA_SAMPLES  bc | c4 | sample (the bundled corpus), and how many records
#   MODELS, DATA_DIR       whose tokenizers, and where the data goes
#   FORCE=1                redo every stage
#   ALLOW_FALLBACK_TOKENIZER=1  an offline tokenizer where the gated one cannot be fetched
# Llama's tokenizer is gated: put HF_TOKEN in secrets.env (cp secrets.env.example secrets.env).
# The host runtime builds .venv with Python 3.12, or the interpreter named by TPRIMAT_HOST_PYTHON.
# Exit: 0 prepared, 1 a stage failed, 2 bad input.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
tp_args "" "$@"
tp_run_stage data
