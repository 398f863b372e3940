#!/usr/bin/env bash
# Install Slurm and MUNGE from the distribution's packages when they are missing, so that the multi-node tests can
# start a real two-node cluster on this machine (tests/slurm/cluster.py). Exit codes: tests/apt_install.sh.
set -euo pipefail
# shellcheck source=tests/apt_install.sh
source "$(dirname "${BASH_SOURCE[0]}")/../apt_install.sh"

readonly DAEMONS=(slurmctld slurmd munged sbatch)

have_all() {
  local daemon
  for daemon in "${DAEMONS[@]}"; do
    command -v "${daemon}" >/dev/null 2>&1 || PATH="${PATH}:/usr/sbin:/sbin" command -v "${daemon}" >/dev/null 2>&1 || return 1
  done
}

apt_install slurm have_all slurm-wlm munge
