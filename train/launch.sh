#!/usr/bin/env bash
# The one launcher behind every train/train_<platform>_<framework>_<model>.sh: validates the
# configuration, then runs one training run with train/launch.py (see its --help).
#   usage: train/launch.sh PLATFORM FRAMEWORK MODEL [--run-dir DIR] [--repeat N]
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../shell/lib.sh"

main() {
  (($# >= 3)) || tp_die 2 "usage: train/launch.sh PLATFORM FRAMEWORK MODEL [--run-dir DIR] [--repeat N]"
  local platform="$1" framework="$2" model="$3"
  shift 3
  PLATFORM="${platform}" FRAMEWORK="${framework}" MODELS="${model}" tp_load_config --quiet
  tp_python -m train.launch --platform "${platform}" --framework "${framework}" --model "${model}" "$@"
}

main "$@"
