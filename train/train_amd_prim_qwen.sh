#!/usr/bin/env bash
# Qwen 2.5 7B with Primus (examples/run_pretrain.sh) on AMD GPUs: one run into a new run directory.
exec bash "$(dirname "${BASH_SOURCE[0]}")/launch.sh" amd prim qwen "$@"
