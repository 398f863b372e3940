#!/usr/bin/env bash
# The one installer of the system packages the tests start for real (Slurm, PostgreSQL, Chromium), sourced by each
# tests/*/install.sh, which names its packages and how to tell they are there.
# apt_install WHAT HAVE PACKAGE...: install PACKAGE... with apt-get unless the function HAVE already succeeds.
# Exit 0: installed (or already there); 3: cannot be installed here (not root, no apt-get) - the tests are then
# skipped with the reason printed here; 1: apt-get failed.

apt_install() {
  local what="$1" have="$2"
  shift 2
  local log="/tmp/tprimat-${what}-install.log"
  if "${have}"; then
    echo "${what} is installed"
    return 0
  fi
  if [[ "$(id -u)" != 0 ]]; then
    echo "cannot install $*: not root (install with: sudo apt-get install -y $*)"
    return 3
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "cannot install $*: no apt-get on this machine (install ${what} with the system's package manager)"
    return 3
  fi
  echo "installing $* with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  # Post-install scripts that try to start a service are refused without an init system, harmlessly (the tests
  # start their own daemons). A missing package list is fetched once.
  if ! apt-get install -y --no-install-recommends "$@" >"${log}" 2>&1; then
    apt-get update >>"${log}" 2>&1 || true
    apt-get install -y --no-install-recommends "$@" >>"${log}" 2>&1 || {
      tail -n 20 "${log}"
      echo "apt-get could not install $* (log: ${log})"
      return 1
    }
  fi
  "${have}" || { echo "installed $* but ${what} is still missing (${have} fails)"; return 1; }
  echo "installed $*"
}
