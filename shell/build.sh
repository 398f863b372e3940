#!/usr/bin/env bash
# usage: ./shell/build.sh
# Build the image tprimat:<platform>-<stack> from <platform>.Dockerfile FROM the STACK row's image
# (utils/spec/stacks.py) for this machine's GPUs, or for PLATFORM=amd|nvd. It rebuilds only when the
# Dockerfile, its requirements or the base image changed (the image carries their hash). It takes no arguments and needs a Docker engine; ./shell/run_train.sh builds it too.
# Exit: 0 built or up to date, 1 the build failed (its last lines are shown), 2 bad input.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  tp_args "" "$@"
  local platform
  platform="$(tp_platform)"
  [[ "${platform}" == amd || "${platform}" == nvd ]] \
    || tp_die 2 "PLATFORM=${platform}: images exist for amd and nvd only (the CPU runs on the host); set PLATFORM=amd or PLATFORM=nvd"
  command -v docker >/dev/null 2>&1 || tp_die 2 "no docker command on PATH; install Docker to build images"
  tp_docker_engine_answers || tp_die 2 "no Docker engine answers (docker info failed); start the Docker daemon"
  local row
  row="$(cd "${TPRIMAT_ROOT}" && "$(tp_host_python)" -m utils.config stack "${platform}")" || exit 2
  eval "${row}"
  tp_build_image "${platform}"
}

main "$@"
