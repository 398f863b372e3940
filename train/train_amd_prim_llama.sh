#!/usr/bin/env bash
# usage: bash train/train_amd_prim_llama.sh [--run-dir DIR] [--repeat N]
# Llama 3.1 8B with Primus (examples/run_pretrain.sh) on AMD GPUs: one run into a new run directory.
exec bash "$(dirname "${BASH_SOURCE[0]}")/launch.sh" amd prim llama "$@"
