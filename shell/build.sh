#!/usr/bin/env bash
# Build tprimat:<platform> from <platform>.Dockerfile (PLATFORM=amd|nvd, default: this machine's).
# Rebuilds only when the Dockerfile or its requirements changed.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  local platform
  platform="$(tp_platform)"
  [[ "${platform}" == amd || "${platform}" == nvd ]] \
    || tp_die 2 "PLATFORM=${platform}: images exist for amd and nvd only (the CPU runs on the host); set PLATFORM=amd or PLATFORM=nvd"
  command -v docker >/dev/null 2>&1 || tp_die 2 "no docker command on PATH; install Docker to build images"
  tp_docker_engine_answers || tp_die 2 "no Docker engine answers (docker info failed); start the Docker daemon"
  tp_build_image "${platform}"
}

main "$@"
