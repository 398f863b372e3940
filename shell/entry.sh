#!/usr/bin/env bash
# Open an interactive shell where the benchmarks run: the platform's container, or .venv on the host.
# From there, one run alone: bash train/train_<platform>_<framework>_<model>.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  tp_load_config
  case "$(tp_choose_runtime "${PLATFORM}")" in
    docker)
      tp_build_image "${PLATFORM}"
      DETACH=0 tp_docker_run "${PLATFORM}" "tprimat-shell" bash ;;
    host)
      [[ -n "${TPRIMAT_PYTHON:-}" ]] || tp_ensure_venv requirements/host.txt
      cd "${TPRIMAT_ROOT}" || exit 1
      PATH="${TPRIMAT_VENV}/bin:${PATH}" TPRIMAT_RUNTIME=host exec bash -i ;;
  esac
}

main "$@"
