#!/usr/bin/env bash
# Install the PostgreSQL server from the distribution's packages when it is missing, so that the results store's
# tests can start a real server on this machine (tests/postgres/server.py). Exit codes: tests/apt_install.sh.
set -euo pipefail
# shellcheck source=tests/apt_install.sh
source "$(dirname "${BASH_SOURCE[0]}")/../apt_install.sh"

have_server() {
  compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null
}

apt_install postgresql have_server postgresql
