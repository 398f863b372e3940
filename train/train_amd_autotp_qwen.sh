#!/usr/bin/env bash
# usage: bash train/train_amd_autotp_qwen.sh [--run-dir DIR] [--repeat N]
# Qwen 2.5 7B with DeepSpeed AutoTP (train/train_autotp.py) on AMD GPUs: one run into a new run directory.
exec bash "$(dirname "${BASH_SOURCE[0]}")/launch.sh" amd autotp qwen "$@"
