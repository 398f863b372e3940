#!/usr/bin/env bash
# usage: ./shell/entry.sh
# Open an interactive shell where the benchmarks run: the platform's container (built first when it is
# out of date), or .venv on the host (built first when missing, with Python 3.12 or TPRIMAT_HOST_PYTHON).
# From there, one run alone: bash train/launch.sh PLATFORM FRAMEWORK MODEL, or its shortcut
# bash train/train_<platform>_<framework>_<model>.sh (see its --help).
# It takes no arguments; PLATFORM and RUNTIME choose as for ./shell/run_train.sh.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  tp_args "" "$@"
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
