#!/usr/bin/env bash
# The Docker runtime of TPrimat's shared shell library (sourced by shell/lib.sh, never run): the image,
# the `docker run` of a stage or a shell, and what a dry run shows instead.
# shellcheck disable=SC2153  # PLATFORM (exported by tp_load_config) is not a misspelt local platform

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

# tprimat:<platform>-<stack>: one image per stack row (STACK_NAME, exported by tp_load_config from
# utils/spec/stacks.py), so switching STACK back and forth rebuilds neither.
tp_image() { echo "tprimat:$1-${STACK_NAME}"; }

# Hash of everything an image is built from, its base image included: rebuild only when it changes.
tp_image_hash() {
  local dockerfile="${TPRIMAT_ROOT}/$1.Dockerfile" copied
  # every requirements file the Dockerfile copies in (its own and requirements/torchtitan.txt)
  mapfile -t copied < <(sed -n 's|^COPY \(requirements/[^ ]*\) .*|'"${TPRIMAT_ROOT}"'/\1|p' "${dockerfile}")
  { cat "${dockerfile}" "${copied[@]}"; echo "BASE_IMAGE=${STACK_IMAGE}"; } | sha256sum | cut -c1-16
}

# True when tprimat:<platform>-<stack> exists and was built from the current Dockerfile, requirements and base.
tp_image_current() {
  local current
  current="$(docker image inspect --format '{{ index .Config.Labels "tprimat.hash" }}' "$(tp_image "$1")" \
    2>/dev/null || true)"
  [[ "${current}" == "$(tp_image_hash "$1")" ]]
}

# The registry digest (repository@sha256:...) of a pulled image, or "unknown" when it has none (built or
# loaded locally): the result then records image_digest null and says why (utils.spec.stacks.image_digest).
tp_base_digest() {
  local digest
  digest="$(docker image inspect --format '{{index .RepoDigests 0}}' "$1" 2>/dev/null || true)"
  echo "${digest:-unknown}"
}

# The base digest tp_build_image labelled tprimat:<platform>-<stack> with; "unknown" before it is built.
tp_image_digest() {
  local digest
  digest="$(docker image inspect --format '{{ index .Config.Labels "tprimat.base_digest" }}' "$(tp_image "$1")" \
    2>/dev/null || true)"
  echo "${digest:-unknown}"
}

# Pull the stack's base image (STACK_IMAGE) and build tprimat:<platform>-<stack> FROM it, labelled with the
# base's digest, unless an image of the same inputs exists.
tp_build_image() {
  local platform="$1" image log digest
  image="$(tp_image "${platform}")"
  if tp_image_current "${platform}"; then
    tp_log "image ${image} is up to date"
    return 0
  fi
  log="$(mktemp)"
  tp_log "pulling ${STACK_IMAGE} (stack ${STACK_NAME})"
  if ! docker pull "${STACK_IMAGE}" >"${log}" 2>&1; then
    tail -n 20 "${log}" >&2
    rm -f "${log}"
    tp_die 1 "docker pull ${STACK_IMAGE} failed (last lines above); check the network and the registry login (nvcr.io: docker login nvcr.io), or choose another STACK"
  fi
  digest="$(tp_base_digest "${STACK_IMAGE}")"
  if [[ "${digest}" == unknown ]]; then
    tp_warn "${STACK_IMAGE} has no registry digest (a local image): results will record image_digest null"
  fi
  tp_log "building ${image} from ${platform}.Dockerfile FROM ${STACK_IMAGE} (${digest})"
  if ! docker build --tag "${image}" --label "tprimat.hash=$(tp_image_hash "${platform}")" \
      --label "tprimat.stack=${STACK_NAME}" --label "tprimat.base_digest=${digest}" \
      --build-arg "BASE_IMAGE=${STACK_IMAGE}" --file "${TPRIMAT_ROOT}/${platform}.Dockerfile" \
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
  printf '%s\n' --workdir "${TPRIMAT_ROOT}" --env TPRIMAT_RUNTIME=docker \
    --env "TPRIMAT_IMAGE_DIGEST=$(tp_image_digest "${platform}")"
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

# DRY_RUN=1 with the docker runtime builds, pulls and starts nothing: it says whether the image is
# current and which container would run the stage, then plans the stage on the host (train.plan and
# the launcher's dry run need only the standard library), where the matrix (train.matrix) prints each run's
# command with the container invocation that would wrap it.
tp_docker_dry_run() {
  local stage="$1" image line
  shift
  image="$(tp_image "${PLATFORM}")"
  if tp_image_current "${PLATFORM}"; then
    tp_log "dry run: image ${image} is up to date"
  else
    tp_log "dry run: a real run would first pull ${STACK_IMAGE} (stack ${STACK_NAME}) and build ${image} from ${PLATFORM}.Dockerfile FROM it (./shell/build.sh)"
  fi
  line="$(tp_docker_command_line "${PLATFORM}" "tprimat-${stage}" bash "shell/${stage}.sh" "$@")" || exit 2
  tp_log "dry run: a real run would start: ${line}"
  TPRIMAT_RUNTIME=docker TPRIMAT_PYTHON="${TPRIMAT_PYTHON:-$(tp_host_python)}" \
    bash "${TPRIMAT_ROOT}/shell/${stage}.sh" "$@"
}
