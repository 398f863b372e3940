#!/usr/bin/env bash
# usage: ./shell/test.sh [PYTEST_ARGUMENT...]
# Every lint and test: set up the test environment (.venv from requirements/host.txt and dev.txt, built
# with Python 3.12 or TPRIMAT_HOST_PYTHON; Slurm and PostgreSQL from the distribution's packages when they can
# be installed), then shellcheck over every shell script and pytest over tests/, one worker per core (pytest-xdist; a test
# file stays on one worker, so its module fixtures, e.g. a trained run set, are built once; -n 0 runs serially; the
# files are handed out in collection order, the longest first: tests/conftest.py's LONGEST_FIRST).
# Arguments go to pytest, which checks them before anything long starts, e.g.
#   ./shell/test.sh -k config        ./shell/test.sh tests/test_entry_points.py -x
# (pytest's own options: .venv/bin/python -m pytest --help). CI runs it through .ci/run.
# Exit: pytest's (0 every test passed, 1 a test failed), 2 bad arguments or setup.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

shell_scripts() {
  git -C "${TPRIMAT_ROOT}" ls-files --cached --others --exclude-standard -- '*.sh' 'tests/fakebin/*' \
    | sed "s|^|${TPRIMAT_ROOT}/|"
}

# Refuse arguments pytest does not accept before the long work starts: pytest parses them and, with
# every path ignored, collects nothing (exit 5); a usage error is its exit 4.
check_pytest_args() {
  local answer code=0
  answer="$(cd "${TPRIMAT_ROOT}" && "${TPRIMAT_VENV}/bin/python" -m pytest "$@" --collect-only -q \
    -p no:cacheprovider --ignore-glob='*' 2>&1)" || code=$?
  ((code != 4)) || tp_die 2 "pytest refuses the arguments: $(grep -i 'error' <<<"${answer}" | tail -n 1) (--help shows the usage)"
}

# What some tests need installed or built before the suite (tests/*/install.sh): the system packages they start for
# real (through tests/apt_install.sh), DeepSpeed's CPU op. One that cannot be installed skips its tests with the
# reason, it does not stop the suite.
install_test_packages() {
  local script
  for script in "${TPRIMAT_ROOT}"/tests/*/install.sh; do
    bash "${script}" || tp_warn "${script#"${TPRIMAT_ROOT}/"} could not install its packages; their tests will be skipped"
  done
}

main() {
  if tp_help_asked "$@"; then
    tp_usage
    return 0
  fi
  tp_ensure_venv requirements/host.txt requirements/dev.txt
  check_pytest_args "$@"
  install_test_packages
  local -a scripts
  mapfile -t scripts < <(shell_scripts)
  tp_log "shellcheck: ${#scripts[@]} scripts"
  "${TPRIMAT_VENV}/bin/shellcheck" "${scripts[@]}"
  tp_log "pytest"
  cd "${TPRIMAT_ROOT}"
  HF_HUB_OFFLINE=1 "${TPRIMAT_VENV}/bin/python" -m pytest -ra -n auto --dist loadfile --no-loadscope-reorder tests "$@"
}

main "$@"
