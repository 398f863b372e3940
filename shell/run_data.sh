#!/usr/bin/env bash
# Entry point: run shell/data.sh in the chosen runtime (docker or host) with the validated configuration.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
tp_run_stage data "$@"
