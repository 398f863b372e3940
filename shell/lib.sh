#!/usr/bin/env bash
# TPrimat's one shared shell library: sourced by every script, never run.
# Here: logging, command lines (usage, argument checks), platform detection, the configuration, the
# project's Python and the host runtime's virtual environment. It sources the rest: shell/lib/docker.sh
# (the Docker runtime) and shell/lib/stage.sh (run_<stage>.sh's dispatch and its stop-signal supervision).
# shellcheck disable=SC2034  # variables set here are used by the scripts that source it

set -euo pipefail

TPRIMAT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly TPRIMAT_ROOT
TPRIMAT_VENV="${TPRIMAT_VENV:-${TPRIMAT_ROOT}/.venv}"
TPRIMAT_KFD="${TPRIMAT_KFD:-/dev/kfd}"  # AMD's kernel driver node (tests point it elsewhere)
TPRIMAT_INFINIBAND="${TPRIMAT_INFINIBAND:-/dev/infiniband}"  # the host's RDMA devices (tests point it elsewhere)
# The oldest Python that every pin of requirements/host.txt and dev.txt installs on: the strictest
# Requires-Python among them (megatron-core 0.17 and later need 3.12). A test keeps it equal to the
# installed pins' metadata. It is also the Python the host looks for first (tp_host_python).
readonly TPRIMAT_MIN_PYTHON=3.12

tp_log() { printf '[tprimat] %s\n' "$*" >&2; }
tp_warn() { printf '[tprimat] warning: %s\n' "$*" >&2; }
tp_die() {
  local code="$1"
  shift
  printf '[tprimat] error: %s\n' "$*" >&2
  exit "${code}"
}

# --- Command line ---------------------------------------------------------------------------------

# The usage of a script (default: the one running): its header comment, every line after the shebang
# up to the first that is not a comment. The header of every script that is run starts "usage: ".
tp_usage() {
  awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "${1:-$0}"
}

# True when -h or --help is among the arguments.
tp_help_asked() {
  local arg
  for arg in "$@"; do
    [[ "${arg}" == -h || "${arg}" == --help ]] && return 0
  done
  return 1
}

# tp_args OPTIONS ARG...: a script's arguments, checked before it does anything. -h or --help prints
# its usage and exits 0; an argument OPTIONS does not name stops it with one line and exit 2. OPTIONS
# lists the accepted options, space-separated; one ending in '=' takes a value ("--run-dir=" accepts
# "--run-dir DIR" and "--run-dir=DIR").
tp_args() {
  local options=" $1 "
  shift
  if tp_help_asked "$@"; then
    tp_usage
    exit 0
  fi
  while (($# > 0)); do
    case "${options}" in
      *" ${1:-?} "*) shift ;;  # a flag (an empty argument is none)
      *" $1= "*)
        (($# >= 2)) || tp_die 2 "$1 needs a value (--help shows the usage)"
        shift 2 ;;
      *" ${1%%=*}= "*) shift ;;  # --option=value
      *) tp_die 2 "unknown argument '$1' (--help shows the usage)" ;;
    esac
  done
}

# --- Platform ---------------------------------------------------------------------------------------

# The vendor tools' answers (nvidia-smi, rocm-smi, amd-smi), read by the one reader, utils.machine.vendor_tools
# (standard library: the host's Python answers before any environment exists).
tp_vendor_tools() {
  (cd "${TPRIMAT_ROOT}" && "$(tp_host_python)" -m utils.machine.vendor_tools "$@")
}

# The vendor of this machine's GPUs, ignoring PLATFORM: nvd, amd or cpu.
tp_detect_platform() { tp_vendor_tools platform; }

# GPUs of the given platform on this machine.
tp_gpu_count() { tp_vendor_tools count "${1:-$(tp_platform)}"; }

# The platform to use: PLATFORM when forced (amd|nvd|cpu), else the detected one.
tp_platform() {
  case "${PLATFORM:-auto}" in
    auto | "") tp_detect_platform ;;
    *) echo "${PLATFORM}" ;;
  esac
}

# --- Configuration ----------------------------------------------------------------------------------

# Validate config.env + environment once and export every resolved knob, with this machine's platform and
# GPU count (TPRIMAT_DETECTED_*, which the tools it starts reuse); exit 2 on bad input. The detection is
# asked afresh: an exported one may come from another machine (a Slurm login node's environment).
# shellcheck disable=SC2120  # callers pass --quiet or nothing
tp_load_config() {
  local exports
  exports="$(cd "${TPRIMAT_ROOT}" && env -u TPRIMAT_DETECTED_PLATFORM -u TPRIMAT_DETECTED_GPUS \
    "$(tp_host_python)" -m utils.config env "$@")" || exit 2
  eval "${exports}"
}

# The host's Python: it validates the configuration (utils.config, standard library only) and creates
# .venv. TPRIMAT_HOST_PYTHON names one; else python3.12 on PATH, else pyenv's 3.12 (a pyenv shim on PATH is
# passed over: it fails for a version not selected; its pyenv root is the shims' parent), else python3
# (tp_require_host_python refuses it if older).
tp_host_python() {
  local want="python${TPRIMAT_MIN_PYTHON}" found="" pyenv_root="${PYENV_ROOT:-${HOME}/.pyenv}"
  found="$(command -v "${want}")" || true
  if [[ -n "${TPRIMAT_HOST_PYTHON:-}" ]]; then
    echo "${TPRIMAT_HOST_PYTHON}"
  elif [[ -n "${found}" && "${found}" != */shims/* ]]; then
    echo "${want}"
  else
    local candidate
    [[ "${found}" != */shims/* ]] || pyenv_root="${found%/shims/*}"
    found=""
    for candidate in "${pyenv_root}/versions/${TPRIMAT_MIN_PYTHON}."*/bin/"${want}"; do
      [[ -x "${candidate}" ]] && found="${candidate}"  # the last: the newest patch release, as the glob sorts
    done
    echo "${found:-python3}"
  fi
}

# Where torch extensions JIT-built for .venv go (on the CPU, DeepSpeed's collective op, which autotp's `environment`
# hook builds before its first run set): once per machine for each set of host pins, host Python and CPU (the op is
# compiled for this CPU's instructions), in the user's cache as uv keeps its packages there, so that another clone or
# a rebuilt .venv finds it built; inside .venv where that cache cannot be written. tp_ensure_venv exports it.
tp_torch_extensions_dir() {
  local cache="${XDG_CACHE_HOME:-${HOME:-}/.cache}" key
  key="$({ cat "${TPRIMAT_ROOT}/requirements/host.txt"; tp_host_python; uname -m
    grep -m2 -E '^(model name|flags)' /proc/cpuinfo 2>/dev/null || true; } | sha256sum | cut -c1-16)"
  if mkdir -p "${cache}/tprimat/torch_extensions" 2>/dev/null; then
    echo "${cache}/tprimat/torch_extensions/${key}"
  else
    echo "${TPRIMAT_VENV}/torch_extensions"
  fi
}

# Stop before .venv is created when the host's Python is older than the pinned requirements need.
tp_require_host_python() {
  local python found need="${TPRIMAT_MIN_PYTHON}"
  local how="install Python ${need} (e.g. pyenv install ${need}) and put python${need} on PATH or set TPRIMAT_HOST_PYTHON=/path/to/python${need}"
  python="$(tp_host_python)"
  found="$("${python}" --version 2>&1)" \
    || tp_die 2 "no Python '${python}' on this machine; TPrimat needs Python ${need} or newer: ${how}"
  if [[ "${found}" =~ ^Python\ ([0-9]+)\.([0-9]+) ]] \
      && ((BASH_REMATCH[1] > ${need%.*} || (BASH_REMATCH[1] == ${need%.*} && BASH_REMATCH[2] >= ${need#*.}))); then
    return 0
  fi
  tp_die 2 "${python} is ${found%%$'\n'*}; TPrimat's pinned requirements need Python ${need} or newer: ${how}"
}

# The project's Python for everything beyond utils.config: TPRIMAT_PYTHON, the container's, or .venv's.
tp_python_bin() {
  if [[ -n "${TPRIMAT_PYTHON:-}" ]]; then
    echo "${TPRIMAT_PYTHON}"
  elif [[ "${TPRIMAT_RUNTIME:-}" == docker ]]; then
    echo python3
  else
    [[ -x "${TPRIMAT_VENV}/bin/python" ]] || tp_die 2 "no Python environment at ${TPRIMAT_VENV}; run ./shell/run_train.sh (or ./shell/test.sh) once to create it"
    echo "${TPRIMAT_VENV}/bin/python"
  fi
}

# Run the project's Python in the repository root.
tp_python() {
  local python
  python="$(tp_python_bin)" || exit
  (cd "${TPRIMAT_ROOT}" && "${python}" "$@")
}

# Stop, naming the file to create, when a gated download will need HF_TOKEN and neither the environment
# nor secrets.env has one, secrets.env read by utils.secrets (the one reader: never grep).
tp_require_token() {
  local why="$1" found=0
  (cd "${TPRIMAT_ROOT}" && "$(tp_host_python)" -m utils.secrets has HF_TOKEN) || found=$?
  case "${found}" in
    0) return 0 ;;
    1) tp_die 2 "${why} needs HF_TOKEN: create secrets.env from secrets.env.example (cp secrets.env.example secrets.env) and put your Hugging Face token in it" ;;
    *) exit 2 ;;  # utils.secrets said which line of secrets.env it cannot read
  esac
}

# --- Host runtime: a virtual environment from pinned requirements -----------------------------------

# Create or update .venv from the given requirements files; a file whose hash is unchanged is skipped.
# A .venv of another Python than the host's is built afresh: its pins were resolved for that one. Exports
# TORCH_EXTENSIONS_DIR for what .venv's runs build (tp_torch_extensions_dir).
tp_ensure_venv() {
  local file stamp hash installer
  tp_venv_matches_host_python || rm -rf "${TPRIMAT_VENV}"
  if [[ ! -x "${TPRIMAT_VENV}/bin/python" ]]; then
    tp_require_host_python
    tp_log "creating the Python environment ${TPRIMAT_VENV} with $(tp_host_python) (first run only)"
    "$(tp_host_python)" -m venv "${TPRIMAT_VENV}"
  fi
  for file in "$@"; do
    stamp="${TPRIMAT_VENV}/.tprimat-$(basename "${file}").sha256"
    hash="$(sha256sum "${TPRIMAT_ROOT}/${file}" | cut -d' ' -f1)"
    if [[ "$(cat "${stamp}" 2>/dev/null)" != "${hash}" ]]; then
      installer="${installer:-$(tp_venv_installer)}"
      tp_log "installing ${file} into ${TPRIMAT_VENV} with ${installer} (a few minutes, once)"
      tp_venv_install "${installer}" -r "${TPRIMAT_ROOT}/${file}" \
        || tp_die 1 "${installer} could not install ${file}; fix the error above and rerun"
      tp_write_bytecode "${file}"
      printf '%s\n' "${hash}" >"${stamp}"
    fi
  done
  TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$(tp_torch_extensions_dir)}"
  export TORCH_EXTENSIONS_DIR
}

# True when .venv is missing or runs the host's Python (major.minor); else says why it is rebuilt. A host Python
# too old for the pins (or none) never removes one: tp_require_host_python refuses it when a .venv is created.
tp_venv_matches_host_python() {
  local venv host need="${TPRIMAT_MIN_PYTHON}"
  [[ -f "${TPRIMAT_VENV}/pyvenv.cfg" ]] || return 0  # none yet, or not a virtual environment: nothing to remove
  host="$("$(tp_host_python)" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" || return 0
  [[ "${host}" =~ ^([0-9]+)\.([0-9]+)$ ]] \
    && ((BASH_REMATCH[1] > ${need%.*} || (BASH_REMATCH[1] == ${need%.*} && BASH_REMATCH[2] >= ${need#*.}))) \
    || return 0
  venv="$("${TPRIMAT_VENV}/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" || venv=""
  [[ "${venv}" != "${host}" ]] || return 0
  tp_log "rebuilding ${TPRIMAT_VENV}: it runs Python ${venv:-(none that starts)}, the host's is $(tp_host_python) (${host})"
  return 1
}

# The installer .venv's requirements go in with: uv (requirements/dev.txt's pin, put into .venv with pip first;
# it installs the same pins several times faster), else pip when uv cannot be installed.
tp_venv_installer() {
  local pin
  pin="$(grep -m1 '^uv==' "${TPRIMAT_ROOT}/requirements/dev.txt" | cut -d' ' -f1)"
  if [[ -x "${TPRIMAT_VENV}/bin/uv" ]] \
      || "${TPRIMAT_VENV}/bin/python" -m pip install --quiet --disable-pip-version-check "${pin}" >&2; then
    echo uv
  else
    tp_warn "${pin} could not be installed (above): installing with pip instead"
    echo pip
  fi
}

# tp_venv_install uv|pip PIP_INSTALL_ARGUMENT...
# Neither compiles the packages' bytecode: all of it (uv --compile-bytecode) took 74 CPU seconds on a 2-core EPYC for
# 15,800 modules, most never imported; tp_write_bytecode writes what each file's users import.
tp_venv_install() {
  local installer="$1"
  shift
  if [[ "${installer}" == uv ]]; then
    "${TPRIMAT_VENV}/bin/uv" pip install --quiet --python "${TPRIMAT_VENV}/bin/python" "$@"
  else
    "${TPRIMAT_VENV}/bin/python" -m pip install --quiet --no-compile --disable-pip-version-check "$@"
  fi
}

# tp_write_bytecode REQUIREMENTS_FILE: the bytecode its users import, once, whatever PYTHONDONTWRITEBYTECODE says
# (where it is set, Python writes none itself, and every process of every run compiled torch and megatron-core
# again: a training worker's imports took 17 s instead of 6 s). After requirements/host.txt, that of the modules the
# runs import (python3 -m utils.machine.bytecode: about 4,400, 33 CPU seconds); after requirements/dev.txt, all of
# .venv's, as the tests import far more than the runs do. A failure is a warning: slower, never wrong.
tp_write_bytecode() {
  local -a write=(-m utils.machine.bytecode)
  [[ "$1" != requirements/dev.txt ]] || write=(-W ignore -m compileall -q -j 0 \
    "$("${TPRIMAT_VENV}/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')")
  tp_log "writing the bytecode of what $1's users import (once)"
  (cd "${TPRIMAT_ROOT}" && "${TPRIMAT_VENV}/bin/python" "${write[@]}") \
    || tp_warn "the bytecode was not all written (above): the processes that import the rest compile it again"
}

# The host runtime on a GPU platform trains with TPRIMAT_PYTHON, or .venv as it is: requirements/host.txt
# holds no GPU stack (CPU or CUDA torch from PyPI; no ROCm build, Transformer Engine, NeMo or Primus), and
# a torch that sees no GPU would train on the CPU a run labelled amd or nvd. So that Python must see the
# vendor's GPUs and each framework's modules (evaluate.probe says what is missing and the ways out), else
# nothing starts. A dry run plans anyway (with the host's Python where no environment exists) and says
# that a real run would stop.
tp_require_gpu_stack() {
  local python="${TPRIMAT_PYTHON:-${TPRIMAT_VENV}/bin/python}" problem
  if problem="$(cd "${TPRIMAT_ROOT}" && "$(tp_host_python)" -m evaluate.probe --require-stack "${PLATFORM}" \
      --frameworks "${FRAMEWORKS}" --python "${python}" --transformer-impl "${TRANSFORMER_IMPL:-transformer_engine}" 2>&1)"; then
    return 0
  fi
  [[ "${DRY_RUN}" == 1 ]] || { printf '%s\n' "${problem}" >&2; exit 2; }
  tp_warn "dry run: a real run would stop here: ${problem#\[tprimat\] error: }"
  if [[ -z "${TPRIMAT_PYTHON:-}" && ! -x "${python}" ]]; then
    TPRIMAT_PYTHON="$(tp_host_python)"
    export TPRIMAT_PYTHON
  fi
}

# shellcheck source=lib/docker.sh
source "${TPRIMAT_ROOT}/shell/lib/docker.sh"
# shellcheck source=lib/stage.sh
source "${TPRIMAT_ROOT}/shell/lib/stage.sh"
