#!/usr/bin/env bash
# usage: ./shell/platform.sh [--detect] [--count]
# Print this machine's platform: nvd (nvidia-smi lists GPUs), amd (amd-smi or rocm-smi list GPUs, or
# /dev/kfd exists) or cpu. PLATFORM=amd|nvd|cpu overrides the detection.
#   --detect   ignore PLATFORM: what this machine has
#   --count    print the number of GPUs of that platform instead
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  tp_args "--detect --count" "$@"
  local detect=0 count=0 arg platform
  for arg in "$@"; do
    case "${arg}" in
      --detect) detect=1 ;;
      --count) count=1 ;;
    esac
  done
  if (( detect )); then platform="$(tp_detect_platform)"; else platform="$(tp_platform)"; fi
  if (( count )); then tp_gpu_count "${platform}"; else echo "${platform}"; fi
}

main "$@"
