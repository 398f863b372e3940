#!/usr/bin/env bash
# usage: bash train/train_nvd_nemo_qwen.sh [--run-dir DIR] [--repeat N]
# Qwen 2.5 7B with NeMo 2.0 (train/train_nemo.py) on NVIDIA GPUs: one run into a new run directory.
exec bash "$(dirname "${BASH_SOURCE[0]}")/launch.sh" nvd nemo qwen "$@"
