#!/usr/bin/env bash
# usage: ./shell/run_purge.sh [--with-data]
# Remove outputs and caches (OUTPUT_DIR's contents, output.zip, Python caches), naming everything
# before it is deleted, in the chosen runtime.
#   --with-data   also delete the prepared data in DATA_DIR
# Exit: 0 done, 2 bad input, 128+signal stopped (130 Ctrl-C).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
tp_args "--with-data" "$@"
tp_run_stage purge "$@"
