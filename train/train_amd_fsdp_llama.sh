#!/usr/bin/env bash
# usage: bash train/train_amd_fsdp_llama.sh [--run-dir DIR] [--repeat N]
# Llama 3.1 8B with PyTorch FSDP2 + DTensor TP (train/train_fsdp.py) on AMD GPUs: one run into a new run directory.
exec bash "$(dirname "${BASH_SOURCE[0]}")/launch.sh" amd fsdp llama "$@"
