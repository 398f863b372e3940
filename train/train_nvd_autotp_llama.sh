#!/usr/bin/env bash
# usage: bash train/train_nvd_autotp_llama.sh [--run-dir DIR] [--repeat N]
# Llama 3.1 8B with DeepSpeed AutoTP (train/train_autotp.py) on NVIDIA GPUs: one run into a new run directory.
exec bash "$(dirname "${BASH_SOURCE[0]}")/launch.sh" nvd autotp llama "$@"
