#!/usr/bin/env bash
# TPrimat's one shared shell library: sourced by every script, never run.
# Logging, command lines (usage, argument checks), configuration, platform detection, runtimes
# (docker | host) and stage dispatch.
# shellcheck disable=SC2034  # variables set here are used by the scripts that source it

set -euo pipefail

TPRIMAT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly TPRIMAT_ROOT
TPRIMAT_VENV="${TPRIMAT_VENV:-${TPRIMAT_ROOT}/.venv}"
TPRIMAT_KFD="${TPRIMAT_KFD:-/dev/kfd}"  # AMD's kernel driver node (tests point it elsewhere)
TPRIMAT_INFINIBAND="${TPRIMAT_INFINIBAND:-/dev/infiniband}"  # the host's RDMA devices (tests point it elsewhere)
# The oldest Python that every pin of requirements/host.txt and dev.txt installs on: the strictest
# Requires-Python among them (numpy 2.4, pandas 3.1, matplotlib 3.11, transformers 5). A test keeps
# it equal to the installed pins' metadata.
readonly TPRIMAT_MIN_PYTHON=3.11

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

# Number of NVIDIA GPUs `nvidia-smi -L` lists (0 when the tool is absent or fails).
tp_nvidia_count() {
  command -v nvidia-smi >/dev/null 2>&1 || { echo 0; return; }
  local listing
  listing="$(nvidia-smi -L 2>/dev/null)" || { echo 0; return; }
  grep -c '^GPU ' <<<"${listing}" || true
}

# Number of AMD GPUs amd-smi or rocm-smi list (0 when neither answers).
tp_amd_count() {
  local listing
  if command -v amd-smi >/dev/null 2>&1 && listing="$(amd-smi list 2>/dev/null)"; then
    grep -c '^GPU' <<<"${listing}" || true
  elif command -v rocm-smi >/dev/null 2>&1 && listing="$(rocm-smi --showproductname --json 2>/dev/null)"; then
    grep -o '"card[0-9]*"' <<<"${listing}" | sort -u | wc -l
  else
    echo 0
  fi
}

# The vendor of this machine's GPUs, ignoring PLATFORM: nvd, amd or cpu.
tp_detect_platform() {
  if (( $(tp_nvidia_count) > 0 )); then
    echo nvd
  elif (( $(tp_amd_count) > 0 )) || [[ -e "${TPRIMAT_KFD}" ]]; then
    echo amd
  else
    echo cpu
  fi
}

# GPUs of the given platform on this machine.
tp_gpu_count() {
  case "${1:-$(tp_platform)}" in
    nvd) tp_nvidia_count ;;
    amd) tp_amd_count ;;
    *) echo 0 ;;
  esac
}

# The platform to use: PLATFORM when forced (amd|nvd|cpu), else the detected one.
tp_platform() {
  case "${PLATFORM:-auto}" in
    auto | "") tp_detect_platform ;;
    *) echo "${PLATFORM}" ;;
  esac
}

# --- Configuration ----------------------------------------------------------------------------------

# Validate config.env + environment once and export every resolved knob (exit 2 on bad input).
# shellcheck disable=SC2120  # callers pass --quiet or nothing
tp_load_config() {
  local exports detected
  detected="$(tp_detect_platform)"
  TPRIMAT_DETECTED_GPUS="$(tp_gpu_count "${detected}")"
  export TPRIMAT_DETECTED_PLATFORM="${detected}" TPRIMAT_DETECTED_GPUS
  exports="$(cd "${TPRIMAT_ROOT}" && "$(tp_host_python)" -m utils.config env "$@")" || exit 2
  eval "${exports}"
}

# The host's Python: it validates the configuration (utils.config, standard library only) and creates
# .venv. TPRIMAT_HOST_PYTHON names another interpreter than the python3 on PATH.
tp_host_python() {
  echo "${TPRIMAT_HOST_PYTHON:-python3}"
}

# Stop before .venv is created when the host's Python is older than the pinned requirements need.
tp_require_host_python() {
  local python found need="${TPRIMAT_MIN_PYTHON}"
  python="$(tp_host_python)"
  found="$("${python}" --version 2>&1)" \
    || tp_die 2 "no Python '${python}' on this machine; TPrimat needs Python ${need} or newer: install it and set TPRIMAT_HOST_PYTHON=/path/to/python${need}"
  if [[ "${found}" =~ ^Python\ ([0-9]+)\.([0-9]+) ]] \
      && ((BASH_REMATCH[1] > ${need%.*} || (BASH_REMATCH[1] == ${need%.*} && BASH_REMATCH[2] >= ${need#*.}))); then
    return 0
  fi
  tp_die 2 "${python} is ${found%%$'\n'*}; TPrimat's pinned requirements need Python ${need} or newer: install it and set TPRIMAT_HOST_PYTHON=/path/to/python${need} (or put it first on PATH as python3)"
}

# The project's Python for everything beyond utils.config: the container's, TPRIMAT_PYTHON, or .venv's.
tp_python() {
  local python
  if [[ -n "${TPRIMAT_PYTHON:-}" ]]; then
    python="${TPRIMAT_PYTHON}"
  elif [[ "${TPRIMAT_RUNTIME:-}" == docker ]]; then
    python=python3
  else
    python="${TPRIMAT_VENV}/bin/python"
    [[ -x "${python}" ]] || tp_die 2 "no Python environment at ${TPRIMAT_VENV}; run ./shell/run_train.sh (or ./shell/test.sh) once to create it"
  fi
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
tp_ensure_venv() {
  local file stamp hash
  if [[ ! -x "${TPRIMAT_VENV}/bin/python" ]]; then
    tp_require_host_python
    tp_log "creating the Python environment ${TPRIMAT_VENV} with $(tp_host_python) (first run only)"
    "$(tp_host_python)" -m venv "${TPRIMAT_VENV}"
  fi
  for file in "$@"; do
    stamp="${TPRIMAT_VENV}/.tprimat-$(basename "${file}").sha256"
    hash="$(sha256sum "${TPRIMAT_ROOT}/${file}" | cut -d' ' -f1)"
    if [[ "$(cat "${stamp}" 2>/dev/null)" != "${hash}" ]]; then
      tp_log "installing ${file} into ${TPRIMAT_VENV} (a few minutes, once)"
      "${TPRIMAT_VENV}/bin/python" -m pip install --quiet --disable-pip-version-check -r "${TPRIMAT_ROOT}/${file}" \
        || tp_die 1 "pip could not install ${file}; fix the error above and rerun"
      printf '%s\n' "${hash}" >"${stamp}"
    fi
  done
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
      --frameworks "${FRAMEWORKS}" --python "${python}" 2>&1)"; then
    return 0
  fi
  [[ "${DRY_RUN}" == 1 ]] || { printf '%s\n' "${problem}" >&2; exit 2; }
  tp_warn "dry run: a real run would stop here: ${problem#\[tprimat\] error: }"
  if [[ -z "${TPRIMAT_PYTHON:-}" && ! -x "${python}" ]]; then
    TPRIMAT_PYTHON="$(tp_host_python)"
    export TPRIMAT_PYTHON
  fi
}

# --- Docker runtime ---------------------------------------------------------------------------------

tp_docker_engine_answers() { docker info >/dev/null 2>&1; }

# docker (GPU platform and an engine answers) or host; prints the choice and why on stderr.
tp_choose_runtime() {
  local platform="$1"
  case "${RUNTIME:-auto}" in
    host)
      tp_log "runtime: host (RUNTIME=host)"
      echo host ;;
    docker)
      command -v docker >/dev/null 2>&1 || tp_die 2 "RUNTIME=docker: no docker command on PATH; install Docker or set RUNTIME=host"
      tp_docker_engine_answers || tp_die 2 "RUNTIME=docker: no Docker engine answers (docker info failed); start the Docker daemon or set RUNTIME=host"
      tp_log "runtime: docker (RUNTIME=docker)"
      echo docker ;;
    *)
      if [[ "${platform}" == cpu ]]; then
        tp_log "runtime: host (the CPU platform runs in ${TPRIMAT_VENV})"
        echo host
      elif command -v docker >/dev/null 2>&1 && tp_docker_engine_answers; then
        tp_log "runtime: docker (${platform} GPUs and a Docker engine answers)"
        echo docker
      else
        tp_log "runtime: host (no Docker engine answers; using ${TPRIMAT_VENV})"
        echo host
      fi ;;
  esac
}

tp_image() { echo "tprimat:$1"; }

# Hash of everything an image is built from: rebuild only when it changes.
tp_image_hash() {
  cat "${TPRIMAT_ROOT}/$1.Dockerfile" "${TPRIMAT_ROOT}/requirements/$1.txt" | sha256sum | cut -c1-16
}

# True when tprimat:<platform> exists and was built from the current Dockerfile and requirements.
tp_image_current() {
  local current
  current="$(docker image inspect --format '{{ index .Config.Labels "tprimat.hash" }}' "$(tp_image "$1")" \
    2>/dev/null || true)"
  [[ "${current}" == "$(tp_image_hash "$1")" ]]
}

# Build tprimat:<platform> from <platform>.Dockerfile unless an image of the same inputs exists.
tp_build_image() {
  local platform="$1" image log
  image="$(tp_image "${platform}")"
  if tp_image_current "${platform}"; then
    tp_log "image ${image} is up to date"
    return 0
  fi
  tp_log "building ${image} from ${platform}.Dockerfile"
  log="$(mktemp)"
  if ! docker build --tag "${image}" --label "tprimat.hash=$(tp_image_hash "${platform}")" \
      --file "${TPRIMAT_ROOT}/${platform}.Dockerfile" \
      "${TPRIMAT_ROOT}" >"${log}" 2>&1; then
    tail -n 20 "${log}" >&2
    rm -f "${log}"
    tp_die 1 "docker build of ${image} failed (last lines above); retry with: ./shell/build.sh"
  fi
  rm -f "${log}"
  tp_log "built ${image}"
}

# Device flags that give a container the vendor's GPUs, and the host's InfiniBand/RoCE devices where
# it has them: without those NCCL/RCCL fall back to TCP sockets between nodes and say so only in their
# INFO log. RDMA registers pinned memory, hence the unlimited memlock on both vendors.
tp_docker_device_flags() {
  case "$1" in
    amd) printf '%s\n' --device=/dev/kfd --device=/dev/dri --group-add video --ipc=host --network=host \
      --cap-add=SYS_PTRACE --security-opt seccomp=unconfined --shm-size=64g --ulimit memlock=-1 ;;
    nvd) printf '%s\n' --gpus all --ipc=host --network=host --ulimit memlock=-1 --ulimit stack=67108864 \
      --shm-size=64g ;;
  esac
  if [[ -d "${TPRIMAT_INFINIBAND}" ]]; then
    printf '%s\n' "--device=${TPRIMAT_INFINIBAND}:/dev/infiniband"
  fi
}

# A multi-node run in a container on a host without RDMA devices: say that its collectives will use
# TCP sockets, before anything starts.
tp_warn_without_rdma() {
  if ((${NNODES:-1} > 1)) && [[ ! -d "${TPRIMAT_INFINIBAND}" ]]; then
    tp_warn "no ${TPRIMAT_INFINIBAND} on this host: the container gets no RDMA device, so NCCL/RCCL connect the ${NNODES} nodes over TCP sockets (the result records the transport as collective_transport)"
  fi
}

# The `docker run` words (one per line) that run COMMAND... in the platform's image, with the
# repository and data mounted at their host paths, the configuration as environment and secrets by
# name only (--env HF_TOKEN: tp_docker_run starts docker with their values as utils.secrets reads
# them; docker's --env-file would read secrets.env by other rules). DETACH=1 runs a named background
# container. Returns 2 when utils.secrets cannot read secrets.env (it says which line).
tp_docker_run_words() {
  local platform="$1" name="$2"
  shift 2
  local dir key names
  names="$(cd "${TPRIMAT_ROOT}" && "$(tp_host_python)" -m utils.secrets names)" || return 2
  printf '%s\n' docker run
  if [[ "${DETACH:-0}" == 1 ]]; then
    printf '%s\n' --detach --name "${name}"
  else
    printf '%s\n' --rm
    [[ "${TP_DOCKER_TTY:-0}" == 1 ]] && printf '%s\n' --interactive --tty
  fi
  tp_docker_device_flags "${platform}"
  for dir in "${TPRIMAT_ROOT}" "${DATA_DIR}" "${OUTPUT_DIR}" "${HF_HOME}"; do
    printf '%s\n' --volume "${dir}:${dir}"
  done
  printf '%s\n' --workdir "${TPRIMAT_ROOT}" --env TPRIMAT_RUNTIME=docker
  for key in $(tp_config_knobs); do
    [[ -v "${key}" ]] && printf '%s\n' --env "${key}=${!key}"
  done
  for key in ${names}; do
    printf '%s\n' --env "${key}"
  done
  printf '%s\n' "$(tp_image "${platform}")" "$@"
}

# The `docker run` of tp_docker_run_words as one line a user can paste (what a dry run shows); the
# secrets are named, never written out, so the shell it is pasted into must export them. Returns 2
# as tp_docker_run_words does.
tp_docker_command_line() {
  local listing
  local -a words
  listing="$(tp_docker_run_words "$@")" || return 2
  mapfile -t words <<<"${listing}"
  printf '%q ' "${words[@]}"
}

# Names of the configuration variables passed into containers (the knobs of config.env).
tp_config_knobs() {
  sed -n 's/^\([A-Z][A-Z0-9_]*\)=.*/\1/p' "${TPRIMAT_ROOT}/config.env" | grep -v '^CPU_'
  printf '%s\n' RUN_SET_DIR
}

# Run COMMAND... in a container; DETACH=1 refuses a second start and says how to follow and stop.
# docker is started by utils.secrets with the secrets set in its environment, whence `--env NAME`
# copies them into the container when it is created: no file holds them but secrets.env, and
# nothing is left to remove, detached or not.
tp_docker_run() {
  local platform="$1" name="$2"
  shift 2
  local listing
  local -a words with_secrets
  local tty=0
  [[ -t 0 && -t 1 ]] && tty=1  # asked here: inside $(...) below, stdout is never a terminal
  listing="$(TP_DOCKER_TTY="${tty}" tp_docker_run_words "${platform}" "${name}" "$@")" || exit 2
  mapfile -t words <<<"${listing}"
  with_secrets=("$(tp_host_python)" -m utils.secrets exec --)
  if [[ "${DETACH:-0}" == 1 ]]; then
    if [[ -n "$(docker ps --quiet --filter "name=^${name}\$" 2>/dev/null)" ]]; then
      tp_die 2 "container ${name} is already running; follow it with 'docker logs -f ${name}' or stop it with 'docker stop ${name}'"
    fi
    docker rm "${name}" >/dev/null 2>&1 || true
    (cd "${TPRIMAT_ROOT}" && "${with_secrets[@]}" "${words[@]}") >/dev/null
    tp_log "started container ${name} in the background"
    tp_log "follow it: docker logs -f ${name}    stop it: docker stop ${name}"
  else
    (cd "${TPRIMAT_ROOT}" && "${with_secrets[@]}" "${words[@]}")
  fi
}

# --- Entry points: run_<stage>.sh -> shell/<stage>.sh in the chosen runtime -------------------------

# Before preparing data on a GPU platform: Llama's tokenizer is gated, so HF_TOKEN must exist
# unless it is already prepared or an offline fallback tokenizer is explicitly allowed.
tp_check_data_secrets() {
  [[ "${PLATFORM}" != cpu && ",${MODELS}," == *,llama,* && "${ALLOW_FALLBACK_TOKENIZER}" != 1 ]] || return 0
  [[ -f "${DATA_DIR}/tokenizers/llama/tokenizer.json" ]] && return 0
  tp_require_token "the Llama 3.1 tokenizer (meta-llama/Llama-3.1-8B, gated)"
}

# Multi-node training from a login node goes to Slurm (shell/slurm.sh): LAUNCHER=slurm, or auto with
# NNODES>1 and sbatch on PATH, as utils.config resolves it (environment over config.env).
tp_slurm_wanted() {
  local mode
  mode="$(cd "${TPRIMAT_ROOT}" && "$(tp_host_python)" -m utils.config get LAUNCH_MODE --quiet)" || exit 2
  [[ "${mode}" == slurm ]]
}

# DRY_RUN=1 with the docker runtime builds, pulls and starts nothing: it says whether the image is
# current and which container would run the stage, then plans the stage on the host (train.plan and
# the launcher's dry run need only the standard library), where shell/train.sh prints each run's
# command with the container invocation that would wrap it.
tp_docker_dry_run() {
  local stage="$1" image line
  shift
  image="$(tp_image "${PLATFORM}")"
  if tp_image_current "${PLATFORM}"; then
    tp_log "dry run: image ${image} is up to date"
  else
    tp_log "dry run: a real run would first build ${image} from ${PLATFORM}.Dockerfile (./shell/build.sh)"
  fi
  line="$(tp_docker_command_line "${PLATFORM}" "tprimat-${stage}" bash "shell/${stage}.sh" "$@")" || exit 2
  tp_log "dry run: a real run would start: ${line}"
  TPRIMAT_RUNTIME=docker TPRIMAT_PYTHON="${TPRIMAT_PYTHON:-$(tp_host_python)}" \
    bash "${TPRIMAT_ROOT}/shell/${stage}.sh" "$@"
}

# The signals that stop a command, one trap each: hangup (an SSH disconnect), Ctrl-C, Ctrl-\, kill.
TP_STOP_SIGNALS=(HUP INT QUIT TERM)

# tp_wait_ended PID: wait until the background job PID has ended, however many trapped signals cut a
# wait short; returns its exit status.
tp_wait_ended() {
  local rc
  while true; do
    rc=0
    wait "$1" || rc=$?
    kill -0 "$1" 2>/dev/null || return "${rc}"
  done
}

# tp_supervise COMMAND...: run COMMAND (a program, or a function of this library) in a process group
# of its own, with no terminal input, and wait for it. A stop signal to this shell goes to that whole
# group, and the shell waits until COMMAND has ended (so it records the stop, and nothing prints after
# the prompt) and exits 128+signal, saying so in one line unless COMMAND did. A program also gets SIGTERM when
# this shell dies, even by SIGKILL (PR_SET_PDEATHSIG); a function's subshell only defers the signals
# until what it runs, which got them from the group, has ended.
tp_supervise() {
  local rc sig
  TP_STOPPED=""
  for sig in "${TP_STOP_SIGNALS[@]}"; do
    # shellcheck disable=SC2064  # the signal's name is fixed now, the child's group when it arrives
    trap "tp_forward_stop ${sig}" "${sig}"
  done
  set -m  # job control: the background command leads a process group of its own
  if declare -F "$1" >/dev/null; then
    (trap : "${TP_STOP_SIGNALS[@]}"; "$@") </dev/null &
  elif command -v setpriv >/dev/null; then
    setpriv --pdeathsig TERM -- "$@" </dev/null &
  else
    tp_warn "setpriv (util-linux) is missing: a SIGKILL of this command would not reach what it starts"
    "$@" </dev/null &
  fi
  TP_CHILD=$!
  set +m
  rc=0
  tp_wait_ended "${TP_CHILD}" || rc=$?
  [[ -n "${TP_STOPPED}" ]] || return "${rc}"
  local code=$((128 + $(kill -l "${TP_STOPPED}")))
  trap '' PIPE  # after a hangup the terminal may be gone: the exit status still says what happened
  # a command that exits 128+signal has said why itself
  ((rc == code)) || tp_log "interrupted by SIG${TP_STOPPED}: everything it started has ended" || true
  exit "${code}"
}

# A stop signal: pass it to the supervised command's process group (a second Ctrl-C too: it hurries).
tp_forward_stop() {
  TP_STOPPED="${TP_STOPPED:-$1}"
  kill -"$1" -- "-${TP_CHILD}" 2>/dev/null || true
}

tp_run_stage() {
  local stage="$1"
  shift
  if [[ "${stage}" == train ]] && tp_slurm_wanted; then
    exec bash "${TPRIMAT_ROOT}/shell/slurm.sh" "$@"
  fi
  tp_load_config
  [[ "${stage}" != data ]] || tp_check_data_secrets
  local runtime
  runtime="$(tp_choose_runtime "${PLATFORM}")"
  case "${runtime}" in
    docker)
      [[ "${stage}" != train ]] || tp_warn_without_rdma
      if [[ "${stage}" == train && "${DRY_RUN}" == 1 ]]; then
        tp_supervise tp_docker_dry_run "${stage}" "$@"
      else
        tp_build_image "${PLATFORM}"
        tp_supervise tp_docker_run "${PLATFORM}" "tprimat-${stage}" bash "shell/${stage}.sh" "$@"
      fi ;;
    host)
      if [[ "${stage}" == train && "${PLATFORM}" != cpu ]]; then
        tp_require_gpu_stack
      elif [[ -z "${TPRIMAT_PYTHON:-}" ]]; then
        tp_ensure_venv requirements/host.txt
      fi
      TPRIMAT_RUNTIME=host tp_supervise bash "${TPRIMAT_ROOT}/shell/${stage}.sh" "$@" ;;
  esac
}
