#!/usr/bin/env bash
# Install Slurm and MUNGE from the distribution's packages when they are missing, so that the
# multi-node tests can start a real two-node cluster on this machine (tests/slurm/cluster.py).
# Exit 0: installed (or already there); 3: cannot be installed here (not root, no apt-get) - the
# tests are then skipped with the reason printed here; 1: apt-get failed.
set -euo pipefail

readonly PACKAGES=(slurm-wlm munge)
readonly DAEMONS=(slurmctld slurmd munged)

have_all() {
  local daemon
  for daemon in "${DAEMONS[@]}" sbatch; do
    command -v "${daemon}" >/dev/null 2>&1 || PATH="${PATH}:/usr/sbin:/sbin" command -v "${daemon}" >/dev/null 2>&1 || return 1
  done
}

main() {
  if have_all; then
    echo "slurm and munge are installed"
    return 0
  fi
  if [[ "$(id -u)" != 0 ]]; then
    echo "cannot install ${PACKAGES[*]}: not root (install them with: sudo apt-get install -y ${PACKAGES[*]})"
    return 3
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "cannot install ${PACKAGES[*]}: no apt-get on this machine (install Slurm and MUNGE with the system's package manager)"
    return 3
  fi
  echo "installing ${PACKAGES[*]} with apt-get (about 10 s)"
  export DEBIAN_FRONTEND=noninteractive
  # Package post-install scripts try to start the services; without an init system that is refused
  # and harmless (the tests run the daemons themselves). A missing package list is fetched once.
  if ! apt-get install -y --no-install-recommends "${PACKAGES[@]}" >/tmp/tprimat-slurm-install.log 2>&1; then
    apt-get update >>/tmp/tprimat-slurm-install.log 2>&1 || true
    apt-get install -y --no-install-recommends "${PACKAGES[@]}" >>/tmp/tprimat-slurm-install.log 2>&1 || {
      tail -n 20 /tmp/tprimat-slurm-install.log
      echo "apt-get could not install ${PACKAGES[*]} (log: /tmp/tprimat-slurm-install.log)"
      return 1
    }
  fi
  have_all || { echo "installed ${PACKAGES[*]} but slurmctld/slurmd/munged/sbatch are still missing"; return 1; }
  echo "installed ${PACKAGES[*]}"
}

main "$@"
