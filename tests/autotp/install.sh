#!/usr/bin/env bash
# Build DeepSpeed's CPU collective op before the suite, as train.matrix does before a run set with autotp
# (train/autotp/environment.py; once per machine and host pins, about 25 s on a 2-core machine): otherwise the first
# test that trains autotp pays DeepSpeed's JIT build inside its own time limit.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${root}"
"${TPRIMAT_VENV:-${root}/.venv}/bin/python" -m train.autotp.environment
