#!/usr/bin/env bash
# usage: bash bench/torchtitan_gpu_check.sh [--wheels DIR] [--data DIR] [--out DIR] [--steps N] [--layers N] [--frameworks LIST] [--eval-interval N] [--precision P] [--install-only|--dry-run]
# TPrimat's torchtitan run on one GPU of a machine without network, end to end, and fsdp beside it on the same
# layout (torchtitan is the reference fsdp must not be slower than): torchtitan and what it needs installed from
# a folder of wheels into a folder on PYTHONPATH over the machine's own torch, then TPrimat's launcher
# (train/launch.sh nvd <framework> llama) trains Llama 3.1 8B cut to a few layers on data prepared by TPrimat's
# data stages, and TPrimat's judge (evaluate.extract for torchtitan's log) turns each run into a result.
#   --wheels DIR  wheels to install with --no-index --no-deps (default .device-wheels): requirements/torchtitan.txt's
#                 and, where the machine lacks them, megatron-core, tokenizers, datasets (pyarrow, pandas, ...),
#                 jsonschema, pyyaml, psutil, protobuf, absl-py
#   --data DIR    a DATA_DIR that ./shell/run_data.sh prepared with DATASET=sample MODELS=llama (default .device-data)
#   --out DIR     where the run set, the result and the extract go (default $OUT, else output/torchtitan-gpu-check)
#   --steps N     optimizer steps (default 20; the first 5 are left out of the steady state)
#   --layers N    Llama 3.1 8B's first N layers (MODEL_LAYERS, default 4)
#   --frameworks LIST  comma list of the frameworks to run, one after the other (default torchtitan,fsdp)
#   --eval-interval N  held-out validation every N steps and after the last (EVAL_INTERVAL; default 0, none): one
#                 global batch of a 20% validation split each time (VALIDATION_PERCENT=20: the sample data's 5% holds
#                 less than one batch of 8 x 2048 tokens), the same documents and samples in every framework
#   --precision P  PRECISION (default bf16; FP8_RECIPE from the environment, default tensorwise); a run of another
#                 precision goes to <framework>-llama-<P>, so that a set holds it beside its bf16 twin (fsdp's fp8
#                 is torchao's float8 training: give its wheel)
#   --install-only  install the folder's wheels into the environment (.device-venv, kept on a warm machine) and
#                 stop: wheels that do not travel in one call (pyarrow alone is 55 MB) go in an earlier call
#   --dry-run     no GPU needed: the environment is not built and the launcher only writes the command
# After the runs, evaluate.compare writes report.md and compare.png over everything in --out (earlier calls' runs too).
# Exit: 0 every run trained and its result is ok, 1 one failed, 2 bad input or a missing GPU, module or data.
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../shell/lib.sh"

# Modules every run imports beyond torch: TPrimat's data and its result's checks (torchtitan's runs add its entry).
readonly NEEDED_MODULES="megatron.core.datasets.gpt_dataset tokenizers jsonschema yaml psutil"

# The folder of packages over the machine's own Python (its torch kept: that Python may itself be a virtual
# environment, whose packages a nested venv would not see), filled with the folder's wheels it lacks; prints the
# Python. The caller puts the folder on PYTHONPATH (site_path).
build_environment() {
  local wheels="$1" site="$2" python
  compgen -G "${wheels}/*.whl" >/dev/null || tp_die 2 "no wheels in ${wheels}; download them as docs/frameworks.md says (section torchtitan)"
  python="$(command -v python3)" || tp_die 2 "no python3 on PATH"
  mkdir -p "${site}"
  # Only the distributions the machine (or an earlier call) does not have yet: its own numpy or pandas is kept.
  local wanted
  wanted="$(PYTHONPATH="$(site_path "${site}")" "${python}" - "${wheels}"/*.whl <<'PY'
import importlib.metadata, pathlib, sys
for wheel in sys.argv[1:]:
    try:
        importlib.metadata.version(pathlib.Path(wheel).name.split("-")[0])
    except importlib.metadata.PackageNotFoundError:
        print(wheel)
PY
)"
  if [[ -n "${wanted}" ]]; then
    local -a files
    mapfile -t files <<<"${wanted}"
    "${python}" -m pip install --quiet --no-index --no-deps --no-compile --disable-pip-version-check \
      --target "${site}" "${files[@]}" >&2 || tp_die 2 "the wheels of ${wheels} did not install (pip's message above)"
    tp_log "installed ${#files[@]} wheel(s) of ${wheels} into ${site}"
  fi
  echo "${python}"
}

# PYTHONPATH with the wheels' folder in front.
site_path() { echo "$1${PYTHONPATH:+:${PYTHONPATH}}"; }

# Stop in one line when the GPU or a module is missing.
check_environment() {
  local python="$1" frameworks="$2" module missing=() modules="${NEEDED_MODULES}"
  [[ ",${frameworks}," != *,torchtitan,* ]] || modules+=" torchtitan.train"
  "${python}" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
    || tp_die 2 "torch in ${python} sees no GPU; run this on the GPU machine (or give --dry-run)"
  local why
  for module in ${modules}; do
    why="$("${python}" -c "import ${module}" 2>&1 >/dev/null)" || missing+=("${module} ($(tail -n 1 <<<"${why}"))")
  done
  ((${#missing[@]} == 0)) || tp_die 2 "${python} cannot import ${missing[*]}: add their wheels (and their dependencies' wheels) to the wheels folder"
}

main() {
  tp_args "--wheels= --data= --out= --steps= --layers= --frameworks= --eval-interval= --precision= --install-only --dry-run" "$@"
  local wheels=".device-wheels" data=".device-data" out="${OUT:-output/torchtitan-gpu-check}" steps=20 layers=4
  local frameworks="torchtitan,fsdp" eval_interval=0 precision=bf16 dry_run=0 install_only=0 python
  while (($# > 0)); do
    case "$1" in
      --wheels | --data | --out | --steps | --layers | --frameworks | --eval-interval | --precision)
        (($# >= 2)) || tp_die 2 "$1 needs a value"
        local name="${1#--}"
        printf -v "${name//-/_}" '%s' "$2"
        shift 2
        ;;
      --wheels=* | --data=* | --out=* | --steps=* | --layers=* | --frameworks=* | --eval-interval=* | --precision=*)
        local name="${1%%=*}"
        name="${name#--}"
        printf -v "${name//-/_}" '%s' "${1#*=}"
        shift
        ;;
      --dry-run) dry_run=1 && shift ;;
      --install-only) install_only=1 && shift ;;
    esac
  done
  [[ "${steps}" =~ ^[0-9]+$ && "${steps}" -gt 5 ]] || tp_die 2 "--steps ${steps}: give a whole number above 5 (the first 5 are warm-up)"
  [[ "${layers}" =~ ^[1-9][0-9]*$ ]] || tp_die 2 "--layers ${layers}: give a whole number above 0"
  [[ "${frameworks}" =~ ^(torchtitan|fsdp|mega)(,(torchtitan|fsdp|mega))*$ ]] \
    || tp_die 2 "--frameworks ${frameworks}: give a comma list of torchtitan, fsdp and mega"
  [[ "${eval_interval}" =~ ^[0-9]+$ ]] || tp_die 2 "--eval-interval ${eval_interval}: give a whole number of steps (0: none)"
  cd "${TPRIMAT_ROOT}"
  if ((install_only)); then
    python="$(build_environment "$(cd "${wheels}" && pwd)" "${TPRIMAT_ROOT}/.device-venv")"
    tp_log "environment ready: ${python} with ${TPRIMAT_ROOT}/.device-venv"
    return 0
  fi
  [[ -d "${data}" ]] || tp_die 2 "no prepared data at ${data}: DATASET=sample MODELS=llama DATA_DIR=${data} ./shell/run_data.sh"
  data="$(cd "${data}" && pwd)"
  mkdir -p "${out}"
  out="$(cd "${out}" && pwd)"
  if ((dry_run)); then
    python="$(tp_host_python)"
  else
    python="$(build_environment "$(cd "${wheels}" && pwd)" "${TPRIMAT_ROOT}/.device-venv")"
    PYTHONPATH="$(site_path "${TPRIMAT_ROOT}/.device-venv")"
    export PYTHONPATH
    check_environment "${python}" "${frameworks}"
    "${python}" -c 'import torch; print(f"[tprimat] torch {torch.__version__} on {torch.cuda.get_device_name()}")'
  fi
  local framework failed=0
  for framework in ${frameworks//,/ }; do
    run_one "${framework}" "${python}" "${data}" "${out}" "${steps}" "${layers}" "${eval_interval}" "${precision}" \
      "${dry_run}" || failed=1
  done
  ((dry_run)) || compare_runs "${python}" "${out}" || failed=1
  return "${failed}"
}

# report.md and compare.png over every result in the folder (the precision check pairs a low-precision run with
# its bf16 twin there).
compare_runs() {
  local python="$1" out="$2"
  (cd "${TPRIMAT_ROOT}" && "${python}" -m evaluate.compare "${out}" -o "${out}/compare") \
    || { tp_warn "evaluate.compare could not compare the runs in ${out}"; return 1; }
}

# One framework's run of Llama 3.1 8B's first layers on one GPU (TP = PP = DP = 1), GA 8: GBS 8 x SL 2048 tokens
# per step; TPrimat's defaults otherwise. torchtitan's result comes from its log (evaluate.extract), fsdp writes
# its own. Prints the result's line; returns 1 when the run did not end ok.
run_one() {
  local framework="$1" python="$2" data="$3" out="$4" steps="$5" layers="$6" eval_interval="$7" precision="$8"
  local dry_run="$9" run_dir="${out}/${framework}-llama"
  [[ "${precision}" == bf16 ]] || run_dir+="-${precision}"
  rm -rf "${run_dir}"
  env PLATFORM=nvd RUNTIME=host TPRIMAT_PYTHON="${python}" MODELS=llama MODEL_LAYERS="${layers}" DATASET=sample \
    DATA_DIR="${data}" OUTPUT_DIR="${out}" TRAIN_ITERS="${steps}" WARMUP_STEPS=2 WARMUP_SKIP=5 GPUS_PER_NODE=1 TP=1 PP=1 DP=1 GA=8 \
    PRECISION="${precision}" FP8_RECIPE="${FP8_RECIPE:-tensorwise}" EVAL_INTERVAL="${eval_interval}" EVAL_TOKENS=16384 \
    VALIDATION_PERCENT=20 \
    TELEMETRY=0 DRY_RUN="${dry_run}" HF_HUB_OFFLINE=1 ALLOW_FALLBACK_TOKENIZER=1 \
    bash train/launch.sh nvd "${framework}" llama --run-dir "${run_dir}" || tp_log "the ${framework} launcher exited $?"
  ((dry_run)) && return 0
  [[ -f "${run_dir}/train.log" ]] || { tp_warn "no train.log in ${run_dir}: the ${framework} run did not start"; return 1; }
  if [[ "${framework}" == torchtitan ]]; then
    (cd "${TPRIMAT_ROOT}" && "${python}" -m evaluate.extract "${run_dir}/train.log" --run-dir "${run_dir}" \
      -o "${out}/extract.json") || { tp_warn "evaluate.extract could not read ${run_dir}/train.log"; return 1; }
  fi
  [[ -f "${run_dir}/result.json" ]] || { tp_warn "no result.json in ${run_dir}"; return 1; }
  "${python}" - "${run_dir}/result.json" <<'PY'
import json, sys
result = json.load(open(sys.argv[1]))
perf, run = result["performance"], result["run"]
evaluation = result.get("evaluation") or {}
losses = dict(zip(*(evaluation.get("points", {}).get(k, []) for k in ("step", "loss"))))
print(f"[tprimat] {result['framework']} {result['model']['variant']} {result['training']['precision']}: status "
      f"{run['status']}, {run['steps_completed']} steps, tokens/s/GPU {perf['tokens_per_s_per_gpu']}, "
      f"TFLOP/s/GPU {perf['tflop_per_s_per_gpu']}, MFU {perf.get('mfu')}, validation loss by step {losses} "
      f"(split {evaluation.get('split')}, {evaluation.get('time_s')} s); warnings: {result['warnings']}")
sys.exit(0 if run["status"] == "ok" else 1)
PY
}

main "$@"
