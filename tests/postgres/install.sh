#!/usr/bin/env bash
# Install the PostgreSQL server from the distribution's packages when it is missing, so that the results store's
# tests can start a real server on this machine (tests/postgres/server.py).
# Exit 0: installed (or already there); 3: cannot be installed here (not root, no apt-get) - the tests are then
# skipped with the reason printed here; 1: apt-get failed.
set -euo pipefail

readonly PACKAGES=(postgresql)
readonly LOG=/tmp/tprimat-postgres-install.log

have_server() {
  compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null
}

main() {
  if have_server; then
    echo "the PostgreSQL server is installed"
    return 0
  fi
  if [[ "$(id -u)" != 0 ]]; then
    echo "cannot install ${PACKAGES[*]}: not root (install it with: sudo apt-get install -y ${PACKAGES[*]})"
    return 3
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "cannot install ${PACKAGES[*]}: no apt-get on this machine (install PostgreSQL with the system's package manager)"
    return 3
  fi
  echo "installing ${PACKAGES[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  # The package's post-install script may try to start a cluster; without an init system that is refused and
  # harmless (the tests start their own server). A missing package list is fetched once.
  if ! apt-get install -y --no-install-recommends "${PACKAGES[@]}" >"${LOG}" 2>&1; then
    apt-get update >>"${LOG}" 2>&1 || true
    apt-get install -y --no-install-recommends "${PACKAGES[@]}" >>"${LOG}" 2>&1 || {
      tail -n 20 "${LOG}"
      echo "apt-get could not install ${PACKAGES[*]} (log: ${LOG})"
      return 1
    }
  fi
  have_server || { echo "installed ${PACKAGES[*]} but no /usr/lib/postgresql/*/bin/postgres"; return 1; }
  echo "installed ${PACKAGES[*]}"
}

main "$@"
