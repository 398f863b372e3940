#!/usr/bin/env bash
# usage: bash train/train_nvd_fsdp_qwen.sh [--run-dir DIR] [--repeat N]
# Qwen 2.5 7B with PyTorch FSDP2 + DTensor TP (train/train_fsdp.py) on NVIDIA GPUs: one run into a new run directory.
exec bash "$(dirname "${BASH_SOURCE[0]}")/launch.sh" nvd fsdp qwen "$@"
