#!/usr/bin/env bash
# Llama 3.1 8B with NeMo 2.0 (train/train_nemo.py) on NVIDIA GPUs: one run into a new run directory.
exec bash "$(dirname "${BASH_SOURCE[0]}")/launch.sh" nvd nemo llama "$@"
