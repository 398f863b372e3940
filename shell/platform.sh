#!/usr/bin/env bash
# Print this machine's platform (amd, nvd or cpu); PLATFORM= overrides it unless --detect is given.
# --count prints the number of GPUs of that platform instead.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  local detect=0 count=0 arg platform
  for arg in "$@"; do
    case "${arg}" in
      --detect) detect=1 ;;
      --count) count=1 ;;
      -h | --help) echo "usage: shell/platform.sh [--detect] [--count]"; return 0 ;;
      *) tp_die 2 "unknown option ${arg}; usage: shell/platform.sh [--detect] [--count]" ;;
    esac
  done
  if (( detect )); then platform="$(tp_detect_platform)"; else platform="$(tp_platform)"; fi
  if (( count )); then tp_gpu_count "${platform}"; else echo "${platform}"; fi
}

main "$@"
