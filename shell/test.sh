#!/usr/bin/env bash
# Set up the test environment (.venv from requirements/host.txt + dev.txt, Slurm when it can be
# installed) and run every lint and test: shellcheck over every shell script, then pytest.
# Extra arguments go to pytest (e.g. ./shell/test.sh -k config).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

shell_scripts() {
  git -C "${TPRIMAT_ROOT}" ls-files --cached --others --exclude-standard -- '*.sh' 'tests/fakebin/*' \
    | sed "s|^|${TPRIMAT_ROOT}/|"
}

main() {
  tp_ensure_venv requirements/host.txt requirements/dev.txt
  if [[ -x "${TPRIMAT_ROOT}/tests/slurm/install.sh" ]]; then
    bash "${TPRIMAT_ROOT}/tests/slurm/install.sh" || tp_warn "Slurm could not be installed; its tests will be skipped"
  fi
  local -a scripts
  mapfile -t scripts < <(shell_scripts)
  tp_log "shellcheck: ${#scripts[@]} scripts"
  "${TPRIMAT_VENV}/bin/shellcheck" "${scripts[@]}"
  tp_log "pytest"
  cd "${TPRIMAT_ROOT}"
  HF_HUB_OFFLINE=1 "${TPRIMAT_VENV}/bin/python" -m pytest -ra tests "$@"
}

main "$@"
