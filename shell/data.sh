#!/usr/bin/env bash
# usage: bash shell/data.sh   (normally through ./shell/run_data.sh)
# Stage script, run by ./shell/run_data.sh in the chosen runtime: prepares DATASET for every model of
# MODELS in DATA_DIR through data.fetch -> data.clean -> data.encode -> data.verify. Each stage is
# skipped when its stamp (DATA_DIR/stamps) shows its outputs complete and made from the same inputs,
# code and parameters; FORCE=1 redoes everything. One run per DATA_DIR at a time: a second waits for
# the first (data/lock.py). Ctrl-C or SIGTERM: the stage running says so in one line, exit 130 or 143.
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

# data_stage NAME [--input P | --output P | --param K=V]... -- MODULE ARG...
data_stage() {
  local name="$1" code=0
  shift
  local -a rerun=()
  [[ "${FORCE}" == 1 ]] && rerun=(--force)
  tp_python -m data.stage --name "${name}" --stamps "${DATA_DIR}/stamps" "${rerun[@]}" "$@" || code=$?
  (( code != 130 && code != 143 )) || exit "${code}"  # interrupted: the stage said so
  (( code == 0 )) || tp_die "${code}" "data stage ${name} failed (see above); fix it and rerun ./shell/run_data.sh"
}

# The tokenizer of one model into DATA_DIR/tokenizers/<model>.
prepare_tokenizer() {
  local model="$1" dir="$2"
  local -a allow=()
  [[ "${ALLOW_FALLBACK_TOKENIZER}" == 1 ]] && allow=(--allow-fallback)
  data_stage "tokenizer-${model}" --input data/tokenizer.py --output "${dir}" \
    --param "platform=${PLATFORM}" --param "allow_fallback=${ALLOW_FALLBACK_TOKENIZER}" \
    -- data.fetch tokenizer --model "${model}" --output-dir "${dir}" --platform "${PLATFORM}" "${allow[@]}"
}

# One model's tokenizer directory, data.encode's output prefix and the pair's prefix, one per line, as
# utils.datafiles lays them out (the one place that knows where prepared data lives).
data_layout() {
  tp_python -m utils.datafiles layout "${DATA_DIR}" "${DATASET}" "$1" || tp_die 2 "cannot lay out the data of $1"
}

# Encode the cleaned corpus with one model's tokenizer, then verify it and write its manifest.
prepare_model() {
  local model="$1" clean="$2" report="$3" workers="$4"
  local layout tokenizer prefix pair
  layout="$(data_layout "${model}")"
  { read -r tokenizer; read -r prefix; read -r pair; } <<<"${layout}"
  prepare_tokenizer "${model}" "${tokenizer}"
  data_stage "encode-${DATASET}-${model}" --input "${clean}" --input "${tokenizer}" \
    --input data/encode.py --input data/bpe.py --input data/indexed.py \
    --output "${pair}.bin" --output "${pair}.idx" \
    -- data.encode --input "${clean}" --tokenizer-model "${tokenizer}" --output-prefix "${prefix}" \
    --workers "${workers}" --append-eod
  data_stage "verify-${DATASET}-${model}" --input "${pair}.bin" --input "${pair}.idx" --input "${tokenizer}" \
    --input "${report}" --input data/verify.py --output "${pair}.manifest.json" \
    --param "seq_length=${SL}" --param "samples=$((TRAIN_ITERS * GBS))" --param "seed=${SEED}" \
    -- data.verify --prefix "${pair}" --tokenizer "${tokenizer}" --clean-report "${report}" \
    --seq-length "${SL}" --samples "$((TRAIN_ITERS * GBS))" --seed "${SEED}"
}

# prepare_models CLEAN REPORT WORKERS MODEL...: each model's tokenizer, pair and verification, the models side by side
# (each is mostly one core's work, the verification's imports most of it); the first failure's exit status once all
# have ended, each having said why.
prepare_models() {
  local clean="$1" report="$2" workers="$3" model pid status code=0
  shift 3
  local -a preparing=()
  for model in "$@"; do
    prepare_model "${model}" "${clean}" "${report}" "${workers}" &
    preparing+=("$!")
  done
  for pid in "${preparing[@]}"; do
    status=0
    wait "${pid}" || status=$?
    ((code)) || code="${status}"
  done
  return "${code}"
}

main() {
  tp_args "" "$@"
  tp_load_config --quiet
  local raw="${DATA_DIR}/raw/${DATASET}.jsonl" clean="${DATA_DIR}/clean/${DATASET}.jsonl"
  local workers model
  workers="$(nproc)"
  local -a bundled=()
  [[ "${DATASET}" == sample ]] && bundled=(--input data/sample/sample.jsonl.gz)
  local lock code=0
  tp_python -m data.lock --create --data-dir "${DATA_DIR}" || exit $?  # a refused write: data.lock said why
  exec {lock}<>"${DATA_DIR}/.run_data.lock" || tp_die 2 "DATA_DIR=${DATA_DIR}: cannot write its lock file"
  tp_python -m data.lock --fd "${lock}" --pid "$$" --data-dir "${DATA_DIR}" || code=$?
  (( code == 0 )) || exit "${code}"  # data.lock said why
  tp_log "data: ${DATASET} (${DATA_SAMPLES} records, seed ${SEED}) for ${MODELS} into ${DATA_DIR}"
  data_stage "fetch-${DATASET}" --input data/fetch.py "${bundled[@]}" \
    --output "${raw}" --output "${DATA_DIR}/raw/${DATASET}.source.json" \
    --param "samples=${DATA_SAMPLES}" --param "seed=${SEED}" \
    -- data.fetch dataset --dataset "${DATASET}" --samples "${DATA_SAMPLES}" --seed "${SEED}" --output "${raw}"
  data_stage "clean-${DATASET}" --input "${raw}" --input data/clean.py --input data/quality.py \
    --output "${clean}" --output "${DATA_DIR}/clean/${DATASET}.report.json" \
    -- data.clean --input "${raw}" --output "${clean}" --workers "${workers}"
  # One pair per tokenizer: llama70b reads llama's (utils/spec/models.py's data_key).
  local -a keys
  mapfile -t keys < <(tp_python -m utils.spec.models data-keys "${MODELS}")
  ((${#keys[@]})) || tp_die 2 "MODELS=${MODELS}: no model to prepare data for"
  prepare_models "${clean}" "${DATA_DIR}/clean/${DATASET}.report.json" "${workers}" "${keys[@]}"
  tp_log "data ready: $(for model in "${keys[@]}"; do data_layout "${model}" | tail -n 1; done | tr '\n' ' ')"
}

main "$@"
