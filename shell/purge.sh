#!/usr/bin/env bash
# usage: bash shell/purge.sh [--with-data]
# Stage script of ./shell/run_purge.sh: remove outputs and caches (output.zip, OUTPUT_DIR's contents,
# Python caches), naming everything before deleting it.
#   --with-data   also delete the prepared data in DATA_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  tp_args "--with-data" "$@"
  local with_data=0
  [[ " $* " != *" --with-data "* ]] || with_data=1
  tp_load_config --quiet
  local -a targets=()
  mapfile -t targets < <(
    find "${OUTPUT_DIR}" -mindepth 1 -maxdepth 1 ! -name .gitkeep 2>/dev/null
    [[ -e "${TPRIMAT_ROOT}/output.zip" ]] && echo "${TPRIMAT_ROOT}/output.zip"
    find "${TPRIMAT_ROOT}" -path "${TPRIMAT_VENV}" -prune -o -type d \
      \( -name __pycache__ -o -name .pytest_cache \) -print 2>/dev/null
    if (( with_data )) && [[ -d "${DATA_DIR}" ]]; then echo "${DATA_DIR}"; fi
  )
  if (( ${#targets[@]} == 0 )); then
    tp_log "nothing to delete"
    return 0
  fi
  tp_log "deleting ${#targets[@]} path(s):"
  printf '  %s\n' "${targets[@]}" >&2
  rm -rf -- "${targets[@]}"
  (( with_data )) || tp_log "prepared data in ${DATA_DIR} kept (add --with-data to delete it)"
}

main "$@"
