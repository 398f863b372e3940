#!/usr/bin/env bash
# usage: bash shell/slurm_job.sh node host|pyxis
# The in-job half of shell/slurm.sh (the job script runs it; not a command for users).
#   sourced by the job script on the first node:  tp_job_prepare  (checks, MASTER_ADDR, slurm.json)
#   run by srun once per node:  bash shell/slurm_job.sh node host|pyxis  -> shell/train.sh as node
#     NODE_RANK=$SLURM_NODEID of NNODES=$SLURM_NNODES, every node walking the same matrix in lockstep
#     (each run is one torchrun rendezvous across the nodes); node 0 writes the results and report.
#   after srun fails:  tp_job_failed CODE  -> the job's exit code is that of the node that failed
#     by itself, not srun's (the largest, often 143 from a node Slurm stopped because another failed).
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

# The IPv4 address other nodes reach NODE at: its NodeAddr in Slurm (a name there is resolved here,
# where Slurm itself resolves it; node names often resolve nowhere).
tp_job_node_addr() {
  local node="$1" record addr word ip
  record="$(scontrol show node -o "${node}")" || tp_die 1 "scontrol show node ${node} failed"
  for word in ${record}; do
    [[ "${word}" != NodeAddr=* ]] || addr="${word#NodeAddr=}"
  done
  [[ -n "${addr:-}" ]] || tp_die 1 "scontrol show node ${node} gives no NodeAddr"
  if [[ "${addr}" =~ ^[0-9]+(\.[0-9]+){3}$ ]]; then
    echo "${addr}"
    return 0
  fi
  ip="$(getent ahostsv4 "${addr}" | awk 'NR == 1 { print $1 }')"
  [[ -n "${ip}" ]] || tp_die 1 "node ${node}: its NodeAddr ${addr} does not resolve on $(hostname); set NodeAddr to an IP address in slurm.conf or fix name resolution"
  echo "${ip}"
}

# Run on the first node of the allocation, before srun: the nodes are what the job was submitted
# for, MASTER_ADDR is the first node's address, and the allocation is recorded in slurm.json.
tp_job_prepare() {
  local detected first nodes
  detected="$(tp_detect_platform)"
  [[ "${detected}" == "${PLATFORM}" ]] \
    || tp_die 2 "PLATFORM=${PLATFORM}, but node $(hostname) has ${detected} $([[ "${detected}" == cpu ]] && echo "(no GPU)" || echo GPUs); submit with PLATFORM=${detected} (a login node cannot see the compute nodes' GPUs)"
  if [[ "${SLURM_CONTAINER}" == none && "${PLATFORM}" != cpu ]]; then
    # Checked here, where the GPUs are (a login node often has none): the job's Python must train on them.
    tp_load_config --quiet
    tp_require_gpu_stack
  fi
  [[ "${SLURM_JOB_NUM_NODES}" == "${NNODES}" ]] \
    || tp_die 2 "the job got ${SLURM_JOB_NUM_NODES} nodes, NNODES=${NNODES}"
  mapfile -t nodes < <(scontrol show hostnames "${SLURM_JOB_NODELIST}")
  first="${nodes[0]}"
  MASTER_ADDR="$(tp_job_node_addr "${first}")"
  export MASTER_ADDR MASTER_PORT
  tp_log "job ${SLURM_JOB_ID}: nodes ${nodes[*]}; rendezvous ${MASTER_ADDR}:${MASTER_PORT} (${first})"
  (cd "${TPRIMAT_ROOT}" && "$(tp_host_python)" - "${RUN_SET_DIR}/slurm.json" "${SLURM_JOB_ID}" \
    "${SLURM_JOB_PARTITION:-}" "${MASTER_ADDR}" "${MASTER_PORT}" "${SLURM_CONTAINER}" "${nodes[@]}") <<'EOF'
"""slurm.json: the allocation the run set ran on (nodes in node-rank order)."""
import sys
from pathlib import Path
from utils.files import write_json
path, job, partition, addr, port, container, *nodes = sys.argv[1:]
write_json(Path(path), {"job_id": int(job), "partition": partition or None, "nnodes": len(nodes), "nodes": nodes,
                        "master_addr": addr, "master_port": int(port), "container": container})
EOF
}

# Where a node that ended by itself (not stopped by Slurm) records its exit code.
tp_job_exit_file() {
  echo "${RUN_SET_DIR}/slurm-node$1.exit"
}

# The job's exit code after srun returned CODE: the first node that failed by itself, else CODE.
tp_job_failed() {
  local code="$1" rank recorded
  for ((rank = 0; rank < NNODES; rank++)); do
    recorded="$(cat "$(tp_job_exit_file "${rank}")" 2>/dev/null || true)"
    if [[ "${recorded}" =~ ^[0-9]+$ ]] && ((recorded != 0)); then
      tp_log "node ${rank} failed with exit code ${recorded}; the other nodes were stopped"
      exit "${recorded}"
    fi
  done
  exit "${code}"
}

# Run by srun on every node: this node's rank, the runtime, then the matrix. A node stopped by a
# signal (Slurm ending the step) records nothing.
tp_job_node() {
  local runtime="$1"
  export NODE_RANK="${SLURM_NODEID}" NNODES="${SLURM_NNODES}"
  case "${runtime}" in
    pyxis) export TPRIMAT_RUNTIME=pyxis TPRIMAT_PYTHON=python3 ;;  # the image's Python
    host) export TPRIMAT_RUNTIME=host ;;
    *) tp_die 2 "slurm_job.sh node: runtime ${runtime} is not one of host, pyxis" ;;
  esac
  tp_log "node ${NODE_RANK}/${NNODES} ($(hostname), ${runtime}): shell/train.sh"
  local code=0
  bash "${TPRIMAT_ROOT}/shell/train.sh" || code=$?
  echo "${code}" >"$(tp_job_exit_file "${NODE_RANK}")"
  return "${code}"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  if tp_help_asked "$@"; then
    tp_usage
    exit 0
  fi
  (($# == 2)) && [[ "$1" == node ]] \
    || tp_die 2 "arguments '$*': expected node host|pyxis (the job script's srun runs this; --help shows the usage)"
  tp_job_node "$2"
fi
