#!/usr/bin/env bash
# usage: bash train/train_cpu_autotp_qwen.sh [--run-dir DIR] [--repeat N]
# Qwen 2.5 7B with DeepSpeed AutoTP (train/train_autotp.py) on the CPU (tiny variant): one run into a new run directory.
exec bash "$(dirname "${BASH_SOURCE[0]}")/launch.sh" cpu autotp qwen "$@"
