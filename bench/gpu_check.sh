#!/usr/bin/env bash
# usage: bash bench/gpu_check.sh [--frameworks LIST] [--wheels DIR] [--data DIR] [--megatron-lm DIR] [--out DIR] [--steps N] [--layers N] [--eval-interval N] [--precision P] [--transformer-impl I] [--run-timeout S] [--install-only|--dry-run|--megatron-lm-from GITDIR]
# One GPU of a machine without network, TPrimat's frameworks end to end on the same work, and Megatron-LM's own
# pretrain_gpt.py beside them: what the machine's Python lacks installed from a folder of wheels into a folder on
# PYTHONPATH over its own torch, then TPrimat's launcher (train/launch.sh <platform> <framework> llama) trains Llama
# 3.1 8B cut to a few layers, TP = PP = DP = 1, GA 8, SL 2048, on data TPrimat's data stages prepared, and TPrimat's
# judge turns each run into a result; bench/gpu_check_table.py prints the table and the ratios.
#   --frameworks LIST  comma list, run one after the other (default mega,megatron-lm,mbridge,fsdp): TPrimat's mega,
#                 mbridge, fsdp, torchtitan, and megatron-lm = Megatron-LM's pretrain_gpt.py on the request mega's
#                 dry run writes (bench/megatron_lm_args.py), its log read by evaluate.extract
#   --wheels DIR  wheels to install with --no-index --no-deps (default .device-wheels; requirements/gpu_check.txt)
#   --data DIR    a DATA_DIR that ./shell/run_data.sh prepared with DATASET=sample MODELS=llama (default .device-data)
#   --megatron-lm DIR  Megatron-LM's pretrain_gpt.py and megatron/training at MEGATRON_LM_COMMIT (default
#                 .device-megatron-lm; --megatron-lm-from GITDIR fills it from a Megatron-LM git directory and stops)
#   --out DIR     where the runs, the table and the report go (default $OUT, else output/gpu-check)
#   --steps N     optimizer steps (default 20; the first 5 are left out of the steady state)
#   --layers N    Llama 3.1 8B's first N layers (MODEL_LAYERS, default 4)
#   --eval-interval N  held-out validation every N steps and after the last (EVAL_INTERVAL; default 0, none): one
#                 global batch of a 20% validation split each time (VALIDATION_PERCENT=20: the sample data's 5% holds
#                 less than one batch of 8 x 2048 tokens), the same documents and samples in every framework
#   --precision P  PRECISION (default bf16; FP8_RECIPE from the environment, default tensorwise); a run of another
#                 precision goes to <framework>-llama-<P>, beside its bf16 twin (fsdp's fp8 is torchao's: its wheel)
#   --transformer-impl I  TRANSFORMER_IMPL for mega and mbridge (default: transformer_engine where the Python imports
#                 it, else local, said in the log and recorded in every result as features.layer_spec)
#   --run-timeout S  seconds one run may take before it is stopped (default 300), so one hang costs one run
#   --install-only  install the folder's wheels into the environment (.device-venv, kept on a warm machine) and stop
#   --dry-run     no GPU needed: the environment is not built and the launcher only writes each command
# After the runs, evaluate.compare writes report.md and compare.png over TPrimat's runs in --out, and table.md holds
# the table. Exit: 0 every run trained and its result is ok, 1 one failed, 2 bad input or a missing GPU, module or data.
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../shell/lib.sh"

# Modules every run imports beyond torch: TPrimat's data and its result's checks; each framework adds its own.
readonly NEEDED_MODULES="megatron.core.datasets.gpt_dataset tokenizers jsonschema yaml psutil"
readonly FRAMEWORKS_ALLOWED="mega|megatron-lm|mbridge|fsdp|torchtitan"
# Megatron-LM's commit whose pretrain_gpt.py runs beside mega: the head of its core_r0.19.0 branch (megatron-core
# 0.19.1), the nearest to the megatron-core 0.19.2 wheel the check carries (requirements/gpu_check.txt), whose commit
# the repository's snapshot does not hold; the two differ in four megatron/core files, none on this check's path
# (transformer_layer.py's FP8/FP4 context, multi_token_prediction.py, model_chunk_schedule_plan.py, a chat endpoint).
readonly MEGATRON_LM_COMMIT="f8837c04ef6cbef6cdefb8de001aad63178aebbf"
readonly MEGATRON_LM_PATHS="pretrain_gpt.py gpt_builders.py model_provider.py megatron/training megatron/post_training"

# The folder of packages over the machine's own Python (its torch kept: that Python may itself be a virtual
# environment, whose packages a nested venv would not see), filled with the folder's wheels it lacks; prints the
# Python. The caller puts the folder on PYTHONPATH (site_path).
build_environment() {
  local wheels="$1" site="$2" python
  compgen -G "${wheels}/*.whl" >/dev/null || tp_die 2 "no wheels in ${wheels}; download requirements/gpu_check.txt as bench/README.md says"
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

# What a framework's runs import beyond NEEDED_MODULES, as a Python statement (megatron.training: the Megatron-LM
# folder's; Megatron-Bridge through the trainer's Transformer Engine stand-in, which must precede its first import).
framework_import() {
  case "$1" in
    mbridge) echo "from train.mbridge.te_stand_in import import_recipes; import_recipes({'llama'})" ;;
    torchtitan) echo "import torchtitan.train" ;;
    megatron-lm) echo "import megatron.training" ;;
  esac
}

# Stop in one line when the GPU or a module is missing (each import run from the Megatron-LM folder with the
# repository on the path, as the runs import them).
check_environment() {
  local python="$1" frameworks="$2" megatron_lm="$3" framework module statement why missing=()
  local -a statements=()
  for module in ${NEEDED_MODULES}; do
    statements+=("import ${module}")
  done
  for framework in ${frameworks//,/ }; do
    statement="$(framework_import "${framework}")"
    [[ -z "${statement}" ]] || statements+=("${statement}")
  done
  "${python}" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
    || tp_die 2 "torch in ${python} sees no GPU; run this on the GPU machine (or give --dry-run)"
  for statement in "${statements[@]}"; do
    why="$(cd "${megatron_lm}" && PYTHONPATH="${TPRIMAT_ROOT}${PYTHONPATH:+:${PYTHONPATH}}" "${python}" -c "${statement}" 2>&1 >/dev/null)" \
      || missing+=("'${statement}' ($(tail -n 1 <<<"${why}"))")
  done
  ((${#missing[@]} == 0)) || tp_die 2 "${python} cannot run ${missing[*]}: add their wheels (and their dependencies' wheels) to the wheels folder"
}

# amd or nvd: the vendor whose build the Python's torch is.
gpu_platform() {
  "$1" -c 'import torch; print("amd" if torch.version.hip else "nvd")'
}

# TRANSFORMER_IMPL for mega and mbridge: what was asked, else Transformer Engine's layers where the Python has it.
transformer_impl() {
  local python="$1" asked="$2"
  if [[ -n "${asked}" ]]; then
    echo "${asked}"
  elif "${python}" -c 'import transformer_engine' 2>/dev/null; then
    echo transformer_engine
  else
    tp_log "no Transformer Engine in ${python}: TRANSFORMER_IMPL=local, megatron-core's own layers (recorded in each result)"
    echo local
  fi
}

main() {
  tp_args "--wheels= --data= --megatron-lm= --megatron-lm-from= --out= --steps= --layers= --frameworks= --eval-interval= --precision= --transformer-impl= --run-timeout= --install-only --dry-run" "$@"
  local wheels=".device-wheels" data=".device-data" megatron_lm=".device-megatron-lm" megatron_lm_from=""
  local out="${OUT:-output/gpu-check}" steps=20 layers=4 frameworks="mega,megatron-lm,mbridge,fsdp" eval_interval=0
  local precision=bf16 transformer_impl="" run_timeout=300 dry_run=0 install_only=0 python platform=nvd
  while (($# > 0)); do
    case "$1" in
      --dry-run) dry_run=1 && shift ;;
      --install-only) install_only=1 && shift ;;
      --*=*)
        local name="${1%%=*}"
        name="${name#--}"
        printf -v "${name//-/_}" '%s' "${1#*=}"
        shift
        ;;
      *)
        local name="${1#--}"
        printf -v "${name//-/_}" '%s' "$2"
        shift 2
        ;;
    esac
  done
  [[ "${steps}" =~ ^[0-9]+$ && "${steps}" -gt 5 ]] || tp_die 2 "--steps ${steps}: give a whole number above 5 (the first 5 are warm-up)"
  [[ "${layers}" =~ ^[1-9][0-9]*$ ]] || tp_die 2 "--layers ${layers}: give a whole number above 0"
  [[ "${frameworks}" =~ ^(${FRAMEWORKS_ALLOWED})(,(${FRAMEWORKS_ALLOWED}))*$ ]] \
    || tp_die 2 "--frameworks ${frameworks}: give a comma list of ${FRAMEWORKS_ALLOWED//|/, }"
  [[ "${eval_interval}" =~ ^[0-9]+$ ]] || tp_die 2 "--eval-interval ${eval_interval}: give a whole number of steps (0: none)"
  [[ "${run_timeout}" =~ ^[1-9][0-9]*$ ]] || tp_die 2 "--run-timeout ${run_timeout}: give a whole number of seconds"
  [[ -z "${transformer_impl}" || "${transformer_impl}" =~ ^(transformer_engine|local)$ ]] \
    || tp_die 2 "--transformer-impl ${transformer_impl}: give transformer_engine or local"
  cd "${TPRIMAT_ROOT}"
  if [[ -n "${megatron_lm_from}" ]]; then
    fill_megatron_lm "${megatron_lm_from}" "${megatron_lm}"
    return 0
  fi
  if ((install_only)); then
    python="$(build_environment "$(cd "${wheels}" && pwd)" "${TPRIMAT_ROOT}/.device-venv")"
    tp_log "environment ready: ${python} with ${TPRIMAT_ROOT}/.device-venv"
    return 0
  fi
  [[ -d "${data}" ]] || tp_die 2 "no prepared data at ${data}: DATASET=sample MODELS=llama DATA_DIR=${data} ./shell/run_data.sh"
  [[ ",${frameworks}," != *,megatron-lm,* || -f "${megatron_lm}/pretrain_gpt.py" ]] \
    || tp_die 2 "no pretrain_gpt.py in ${megatron_lm}: bash bench/gpu_check.sh --megatron-lm-from <a Megatron-LM git directory>"
  data="$(cd "${data}" && pwd)"
  mkdir -p "${out}"
  out="$(cd "${out}" && pwd)"
  [[ ! -d "${megatron_lm}" ]] || megatron_lm="$(cd "${megatron_lm}" && pwd)"
  if ((dry_run)); then
    python="$(tp_host_python)"
    transformer_impl="${transformer_impl:-local}"
  else
    python="$(build_environment "$(cd "${wheels}" && pwd)" "${TPRIMAT_ROOT}/.device-venv")"
    PYTHONPATH="$(site_path "${TPRIMAT_ROOT}/.device-venv")"
    export PYTHONPATH
    check_environment "${python}" "${frameworks}" "${megatron_lm:-.}"
    platform="$(gpu_platform "${python}")"
    transformer_impl="$(transformer_impl "${python}" "${transformer_impl}")"
    "${python}" -c 'import torch; print(f"[tprimat] torch {torch.__version__} on {torch.cuda.get_device_name()}")'
    "${python}" -m evaluate.health --json --platform "${platform}" >"${out}/health.json" \
      || tp_warn "evaluate.health could not check the node"
  fi
  local framework failed=0
  local -a settings=("${python}" "${platform}" "${data}" "${out}" "${steps}" "${layers}" "${eval_interval}"
    "${precision}" "${transformer_impl}" "${run_timeout}" "${dry_run}")
  for framework in ${frameworks//,/ }; do
    if [[ "${framework}" == megatron-lm ]]; then
      run_megatron_lm "${megatron_lm}" "${settings[@]}" || failed=1
    else
      run_one "${framework}" "${settings[@]}" || failed=1
    fi
  done
  if ((!dry_run)); then
    "${python}" -m bench.gpu_check_table "${out}" -o "${out}/table.md" || failed=1
    compare_runs "${python}" "${out}" || failed=1
  fi
  return "${failed}"
}

# Megatron-LM's files at MEGATRON_LM_COMMIT from a git directory into the folder that travels (never committed).
fill_megatron_lm() {
  local from="$1" into="$2"
  git -C "${from}" cat-file -e "${MEGATRON_LM_COMMIT}^{commit}" 2>/dev/null \
    || tp_die 2 "--megatron-lm-from ${from}: no Megatron-LM commit ${MEGATRON_LM_COMMIT} there (fetch NVIDIA/Megatron-LM)"
  rm -rf "${into}.partial" && mkdir -p "${into}.partial"
  # shellcheck disable=SC2086 # the paths are words
  git -C "${from}" archive "${MEGATRON_LM_COMMIT}" ${MEGATRON_LM_PATHS} | tar -x -C "${into}.partial"
  rm -rf "${into}" && mv "${into}.partial" "${into}"
  tp_log "Megatron-LM ${MEGATRON_LM_COMMIT} (${MEGATRON_LM_PATHS}) in ${into}"
}

# report.md and compare.png over TPrimat's runs in the folder (the reference run is Megatron-LM's, not a framework
# of the comparison; the precision check pairs a low-precision run with its bf16 twin there).
compare_runs() {
  local python="$1" out="$2" runs=()
  mapfile -t runs < <(find "${out}" -mindepth 2 -maxdepth 2 -name result.json -not -path "*/megatron-lm-*" -printf '%h\n')
  ((${#runs[@]} > 0)) || return 0
  (cd "${TPRIMAT_ROOT}" && "${python}" -m evaluate.compare "${runs[@]}" -o "${out}/compare") \
    || { tp_warn "evaluate.compare could not compare the runs in ${out}"; return 1; }
}

# The launcher's environment for one run of Llama 3.1 8B's first layers on one GPU (TP = PP = DP = 1), GA 8:
# GBS 8 x SL 2048 tokens per step; TPrimat's defaults otherwise.
launch() {
  local framework="$1" python="$2" platform="$3" data="$4" out="$5" steps="$6" layers="$7" eval_interval="$8"
  local precision="$9" transformer_impl="${10}" run_timeout="${11}" dry_run="${12}" run_dir="${13}"
  timeout --signal=TERM --kill-after=30 "${run_timeout}" env PLATFORM="${platform}" RUNTIME=host \
    TPRIMAT_PYTHON="${python}" MODELS=llama MODEL_LAYERS="${layers}" DATASET=sample \
    DATA_DIR="${data}" OUTPUT_DIR="${out}" TRAIN_ITERS="${steps}" WARMUP_STEPS=2 WARMUP_SKIP=5 GPUS_PER_NODE=1 TP=1 PP=1 DP=1 GA=8 \
    PRECISION="${precision}" FP8_RECIPE="${FP8_RECIPE:-tensorwise}" EVAL_INTERVAL="${eval_interval}" EVAL_TOKENS=16384 \
    VALIDATION_PERCENT=20 TRANSFORMER_IMPL="${transformer_impl}" \
    TELEMETRY=1 HEALTH=off DRY_RUN="${dry_run}" HF_HUB_OFFLINE=1 ALLOW_FALLBACK_TOKENIZER=1 \
    bash train/launch.sh "${platform}" "${framework}" llama --run-dir "${run_dir}"
}

# One TPrimat framework's run; prints the result's line; returns 1 when the run did not end ok.
run_one() {
  local framework="$1" run_dir="${5}/$1-llama"
  [[ "${9}" == bf16 ]] || run_dir+="-${9}"
  rm -rf "${run_dir}"
  launch "$@" "${run_dir}" || tp_log "the ${framework} launcher exited $?"
  ((${12})) && return 0
  summary "$2" "${run_dir}"
}

# Megatron-LM's own pretrain_gpt.py on the request mega's dry run writes for the same settings, its log read by
# evaluate.extract with that request (the result's effective settings then show any difference from mega's).
run_megatron_lm() {
  local megatron_lm="$1"
  shift
  local python="$1" out="$4" run_timeout="${10}" dry_run="${11}" run_dir="${4}/megatron-lm-llama"
  [[ "${8}" == bf16 ]] || run_dir+="-${8}"
  rm -rf "${run_dir}"
  launch mega "${@:1:10}" 1 "${run_dir}" >/dev/null || { tp_warn "mega's dry run wrote no request for Megatron-LM"; return 1; }
  local -a args
  mapfile -t args < <(cd "${TPRIMAT_ROOT}" && "${python}" -m bench.megatron_lm_args "${run_dir}/config.json" \
    --megatron-lm "${megatron_lm}") || { tp_warn "no pretrain_gpt.py arguments for ${run_dir}/config.json"; return 1; }
  # pretrain_gpt.py through bench/megatron_lm_pretrain.py: its compile_helpers() answered where helpers_cpp is built
  local -a command=("${python}" -m torch.distributed.run --nproc-per-node 1 --master-port 29512
    -m bench.megatron_lm_pretrain "${megatron_lm}/pretrain_gpt.py" "${args[@]}")
  printf '%q ' "${command[@]}" >"${run_dir}/command.sh"
  tp_log "Megatron-LM: ${command[*]}"
  ((dry_run)) && return 0
  local code=0
  (cd "${megatron_lm}" && PYTHONPATH="${TPRIMAT_ROOT}${PYTHONPATH:+:${PYTHONPATH}}" CUDA_DEVICE_MAX_CONNECTIONS=1 \
    HF_HUB_OFFLINE=1 timeout --signal=TERM --kill-after=30 \
    "${run_timeout}" "${command[@]}") >"${run_dir}/train.log" 2>&1 || code=$?
  tail -n 5 "${run_dir}/train.log" >&2
  (cd "${TPRIMAT_ROOT}" && "${python}" -m evaluate.probe -o "${run_dir}/system.json") \
    || tp_warn "the system probe failed: the reference's result will have no device peak"
  (cd "${TPRIMAT_ROOT}" && "${python}" -m evaluate.extract "${run_dir}/train.log" --run-dir "${run_dir}" \
    --run-id megatron-lm-llama --exit-code "${code}" -o "${run_dir}/result.json") \
    || { tp_warn "evaluate.extract could not read ${run_dir}/train.log"; return 1; }
  summary "${python}" "${run_dir}"
}

# The result's line; 1 when there is none or it is not ok.
summary() {
  local python="$1" run_dir="$2"
  [[ -f "${run_dir}/result.json" ]] || { tp_warn "no result.json in ${run_dir}"; return 1; }
  "${python}" - "${run_dir}/result.json" <<'PY'
import json, sys
result = json.load(open(sys.argv[1]))
perf, run = result["performance"], result["run"]
evaluation = result.get("evaluation") or {}
losses = dict(zip(*(evaluation.get("points", {}).get(k, []) for k in ("step", "loss"))))
print(f"[tprimat] {run['id']} {result['model']['variant']} {result['training']['precision']}: status "
      f"{run['status']}, {run['steps_completed']} steps, tokens/s/GPU {perf['tokens_per_s_per_gpu']}, "
      f"TFLOP/s/GPU {perf['tflop_per_s_per_gpu']}, MFU {perf.get('mfu')}, validation loss by step {losses}; "
      f"warnings: {result['warnings']}")
sys.exit(0 if run["status"] == "ok" else 1)
PY
}

main "$@"
