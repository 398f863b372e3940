"""The trainers' data (mega, fsdp, autotp): the prepared dataset (checked before anything is built), or mock
tokens on request.

Real data is megatron-core's GPTDataset over the request's prefix (DATA_DIR/<dataset>_<model>_text_document,
utils.datafiles) through BlendedMegatronDatasetBuilder, as Megatron-LM reads it. A run refuses to start when that prefix
is not proven to hold the files data.verify verified (utils.datafiles: sizes, sha256, tokenizer,
token range), and its result carries the fingerprint of the files it read. MOCK_DATA=1 is the only way to synthetic
tokens (megatron-core's MockGPTDataset), and the result then says so.

Sample order follows Megatron-LM's pretraining sampler: step i takes the GBS samples after the
first i x GBS; each microbatch is the next MBS x DP of them, and DP rank r takes the r-th MBS.
So a layout change (DP, GA, MBS) regroups the same samples but never changes which ones a step sees.

With EVAL_INTERVAL (utils/spec/evaluation.py), megatron-core's builder splits the documents by the request's split
string (95,5,0 at VALIDATION_PERCENT=5; 100,0,0 without validation, as before): the validation documents are a
contiguous range of the prepared (seed-shuffled) documents, never trained on, the same in every framework; their
count and the sha256 of their token ids go into the result (ValidationSplit.result_split).

A run asking for more samples than the corpus holds reads it several times, and the first rank says so in one line
(corpus_reads). megatron-core does not reshuffle each reading apart: it shuffles all the copies of the documents
together (one numpy RandomState seeded with SEED; a last copy read less than 80% is shuffled apart), cuts that stream
into sequences and shuffles the sequences again, so a document may come round again before another is read once.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy
import torch

from utils import missing_stacks
from utils.datafiles import PREPARE as PREPARE_COMMAND
from utils.datafiles import DataProblem, ensure_dataset_helpers, prove
from utils.spec.fairness import WORKLOAD
from utils.spec.models import ModelSpec
from utils.spec.evaluation import Evaluation
from utils.spec.request import NO_EVALUATION, Data

missing_stacks.quiet_notes()  # every trainer imports this module before megatron-core

BATCH_KEYS = ("tokens", "labels", "loss_mask", "position_ids")
# megatron-core's GPTDataset (_build_document_sample_shuffle_indices): a last reading of the corpus used less than this
# share is shuffled apart from the readings before it.
SEPARATE_FINAL_READ_BELOW = 0.80


class DataError(Exception):
    """The dataset is not ready: one line naming what is missing and the command that prepares it."""


@dataclass(frozen=True)
class DataSource:
    """What a run trains on, with the fingerprints that prove it."""

    mock: bool
    prefix: Path | None  # None with mock data
    fingerprint: str | None
    tokenizer_fingerprint: str | None
    eod: int  # end-of-document id: the tokenizer's end-of-sequence token (mock data: the last vocabulary row)
    tokenizer_vocab: int


@dataclass(frozen=True)
class DatasetTokenizer:
    """The two tokenizer facts GPTDataset uses (no pad attribute: megatron-core then uses its own pad id)."""

    eod: int
    vocab_size: int
    fingerprint: str | None
    dataset_fingerprint: str | None

    @property
    def unique_identifiers(self) -> dict:
        """What megatron-core hashes into the name of its cached sample index: with the dataset's fingerprint, an
        index built from other contents at the same path is never reused."""
        return {"class": type(self).__name__, "eod": self.eod, "vocab_size": self.vocab_size,
                "fingerprint": self.fingerprint, "dataset_fingerprint": self.dataset_fingerprint}


def read_tokenizer(directory: Path) -> tuple[int, int]:
    """(end-of-document id, vocabulary size incl. special tokens) of a Hugging Face tokenizer directory."""
    from tokenizers import Tokenizer

    try:
        config = json.loads((directory / "tokenizer_config.json").read_text())
        tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    except Exception as err:  # noqa: BLE001 - tokenizers raises plain Exception subclasses
        raise DataError(f"{directory}: not a readable tokenizer directory ({err}); prepare it with {PREPARE_COMMAND}") \
            from None
    eos = config.get("eos_token")
    eos = eos.get("content") if isinstance(eos, dict) else eos
    eod = tokenizer.token_to_id(eos) if eos else None
    if eod is None:
        raise DataError(f"{directory}: tokenizer_config.json names no end-of-document token (eos_token) the "
                        f"tokenizer knows; prepare the tokenizer again with {PREPARE_COMMAND}")
    return eod, tokenizer.get_vocab_size(with_added_tokens=True)


def locate(data: Data, model: ModelSpec) -> DataSource:
    """Prove the request's data for one model (utils.datafiles.prove) before any model is built; raises DataError.

    The launcher proved it already (train.plan.data_problems); here each rank proves it again, from the hashes
    remembered then, so that nothing trains on files changed since, and the fingerprint is of what is read."""
    if data.mock_data:
        return DataSource(mock=True, prefix=None, fingerprint=None, tokenizer_fingerprint=None,
                          eod=model.vocab_size - 1, tokenizer_vocab=model.vocab_size)
    prefix, tokenizer, dataset = Path(data.prefix), Path(data.tokenizer_dir), data.dataset
    try:
        verified = prove(prefix, tokenizer, model.key, model.vocab_size)
    except DataProblem as err:
        raise DataError(f"{err} (DATASET={dataset}), or set MOCK_DATA=1 for synthetic tokens") from None
    # The two facts as data.verify read them from these very files (their sha256 was just proven): each rank then
    # loads no tokenizer (0.5 s of every run's start with Llama's); a manifest from before it recorded them is read.
    recorded = verified.manifest["tokenizer"]
    eod, tokenizer_vocab = (recorded["eos_id"], recorded["vocab_size"]) \
        if recorded.get("eos_id") is not None and recorded.get("vocab_size") else read_tokenizer(tokenizer)
    if tokenizer_vocab > model.vocab_size:
        raise DataError(f"{tokenizer}: {tokenizer_vocab} tokens do not fit the model's {model.vocab_size} embedding "
                        f"rows; this is not the {model.key} tokenizer, prepare it with {PREPARE_COMMAND} "
                        f"(DATASET={dataset})")
    return DataSource(mock=False, prefix=prefix, fingerprint=verified.fingerprint,
                      tokenizer_fingerprint=verified.tokenizer_fingerprint, eod=eod, tokenizer_vocab=tokenizer_vocab)


@dataclass(frozen=True)
class ValidationSplit:
    """The held-out documents a run evaluates on (utils/spec/evaluation.py) and the samples one evaluation reads.

    MLPerf evaluates a fixed set: every evaluation reads the same first `samples` (iters x GBS) sequences of the
    validation split, in the same order (validation_microbatches), so that two evaluations differ by the model alone.
    """

    dataset: object  # megatron-core's GPTDataset of the validation split
    iters: int  # global batches per evaluation
    samples: int  # iters x GBS
    megatron_split: str
    percent: int
    documents: int | None  # validation documents; None with mock data
    fingerprint: str | None  # sha256 of the validation documents' token ids; None with mock data or off the last rank

    def result_split(self) -> dict:
        """The result's evaluation.split."""
        return {"megatron_split": self.megatron_split, "documents": self.documents, "fingerprint": self.fingerprint,
                "percent": self.percent}


def documents_fingerprint(documents) -> str:
    """sha256 over the documents in order, each as its token count (8 bytes) and its ids (4 bytes each), little
    endian: the same documents give the same fingerprint whatever dtype the .bin stores them in."""
    digest = hashlib.sha256()
    for tokens in documents:
        ids = numpy.asarray(tokens).astype("<i4")
        digest.update(len(ids).to_bytes(8, "little"))
        digest.update(ids.tobytes())
    return f"sha256:{digest.hexdigest()}"


def build_dataset(source: DataSource, seq_len: int, num_samples: int, seed: int, cache_dir: Path):
    """The training split of a run without validation (all of the data) with at least num_samples samples; call on
    every rank."""
    return build_splits(source, seq_len, num_samples, seed, cache_dir)[0]


def build_splits(source: DataSource, seq_len: int, num_samples: int, seed: int, cache_dir: Path, *,
                 evaluation: Evaluation = NO_EVALUATION, gbs: int = 1,
                 fingerprint: bool = False) -> tuple[object, ValidationSplit | None]:
    """The training split with num_samples samples and, where the request evaluates, the validation split with one
    evaluation's samples (evaluation.iters(gbs, seq_len) global batches), both from megatron-core's builder over the
    request's split (utils.spec.evaluation: 100,0,0 without validation, so such a run trains on what it always did);
    call on every rank. fingerprint: hash the validation documents (on the rank that writes the result).

    megatron-core is imported here, not at the top, so that a missing dataset is reported in a second.
    """
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig, MockGPTDataset

    split = evaluation.megatron_split()
    iters = evaluation.iters(gbs, seq_len) if evaluation.enabled else 0
    config = GPTDatasetConfig(
        random_seed=seed,
        sequence_length=seq_len,
        blend=None if source.mock else ([str(source.prefix)], None),
        split=split,
        path_to_cache=None if source.mock else str(cache_dir),
        tokenizer=DatasetTokenizer(source.eod, source.tokenizer_vocab, source.tokenizer_fingerprint, source.fingerprint),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=bool(WORKLOAD["eod_mask_loss"]),  # the one workload of every framework (utils.spec.fairness)
        create_attention_mask=False,  # causal attention needs no mask tensor
    )
    try:
        ensure_dataset_helpers()
    except DataProblem as err:
        raise DataError(str(err)) from None
    cls = MockGPTDataset if source.mock else GPTDataset
    train, valid, _ = BlendedMegatronDatasetBuilder(cls, [num_samples, iters * gbs, 0], lambda: True,
                                                    config).build()
    if train is None or len(train) < num_samples:
        raise DataError(f"{source.prefix}: could not build {num_samples} training samples of {seq_len} tokens")
    if not source.mock and (not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0):
        lengths = train.dataset.sequence_lengths[train.indices]
        line = corpus_reads(len(lengths), int(lengths.sum()), seq_len, num_samples, seed,
                            int(config.add_extra_token_to_sequence))
        if line:
            print(f"[tprimat] data: {line}", flush=True)
    if not evaluation.enabled:
        return train, None
    return train, validation_split(valid, source, evaluation, iters, gbs, seq_len,
                                   int(config.add_extra_token_to_sequence), fingerprint)


def validation_split(valid, source: DataSource, evaluation: Evaluation, iters: int, gbs: int, seq_len: int,
                     extra: int, fingerprint: bool) -> ValidationSplit:
    """The built validation split, refused (DataError) when it cannot give one evaluation's samples without reading
    a document twice: too few documents for VALIDATION_PERCENT, or too few tokens for EVAL_TOKENS."""
    samples = iters * gbs
    fix = (f"raise VALIDATION_PERCENT={evaluation.validation_percent} or lower EVAL_TOKENS={evaluation.tokens} "
           f"(one evaluation reads {iters} global batch(es) of {gbs} x {seq_len} tokens)")
    documents = 0 if valid is None else len(valid.indices)
    if documents == 0:
        raise DataError(f"{source.prefix or 'mock data'}: the validation split {evaluation.megatron_split()} holds no "
                        f"document; {fix}")
    lengths = valid.dataset.sequence_lengths[valid.indices]
    needed = samples * seq_len + extra
    if int(lengths.sum()) < needed or len(valid) < samples:
        raise DataError(f"{source.prefix or 'mock data'}: the validation split ({documents:,} documents, "
                        f"{int(lengths.sum()):,} tokens) is smaller than one evaluation's {needed:,} tokens; {fix}")
    return ValidationSplit(
        dataset=valid, iters=iters, samples=samples, megatron_split=evaluation.megatron_split(),
        percent=evaluation.validation_percent, documents=None if source.mock else documents,
        fingerprint=documents_fingerprint(valid.dataset[int(index)] for index in valid.indices)
        if fingerprint and not source.mock else None)


def corpus_reads(documents: int, tokens: int, seq_len: int, num_samples: int, seed: int, extra: int = 1) -> str | None:
    """The line saying how many times a run reads a corpus of `tokens` in `documents` for `num_samples` sequences
    (each of seq_len tokens plus `extra`, GPTDataset's add_extra_token_to_sequence) and in what order; None when it
    is read once. The count follows megatron-core's _get_num_epochs."""
    needed = num_samples * seq_len + extra
    reads = max(1, -(-needed // tokens))
    if reads == 1:
        return None
    per_read = (tokens - extra) // seq_len
    last = num_samples - ((reads - 1) * tokens - extra) // seq_len  # sequences taken from the last reading
    apart = (f"; the last reading, {last:,} of its {per_read:,} sequences, is shuffled apart"
             if last < int(SEPARATE_FINAL_READ_BELOW * per_read) else "")
    return (f"the corpus of {per_read:,} sequences of {seq_len} tokens ({documents:,} documents) is read {reads:,} "
            f"times for the run's {num_samples:,} samples: megatron-core shuffles the {reads:,} copies of its "
            f"documents together with SEED={seed}, not each reading apart, so a document may come round again before "
            f"another is read once{apart}")


def microbatches(dataset, *, steps: int, mbs: int, dp: int, dp_rank: int, ga: int,
                 device: torch.device) -> Iterator[dict[str, torch.Tensor]]:
    """This DP rank's microbatches, step after step, in Megatron-LM's sample order, on the device (a validation
    split's: one evaluation's global batches, each evaluation a new iterator from its first sample)."""
    gbs = mbs * dp * ga
    for step in range(steps):
        for micro in range(ga):
            first = step * gbs + micro * mbs * dp + dp_rank * mbs
            samples = [dataset[index] for index in range(first, first + mbs)]
            yield {key: torch.stack([torch.as_tensor(s[key]) for s in samples]).to(device, non_blocking=True)
                   for key in BATCH_KEYS}
