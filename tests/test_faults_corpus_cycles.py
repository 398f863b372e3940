"""TRAIN_ITERS far past the corpus: the run reads it several times and says so in one line, with the order
megatron-core's GPTDataset really gives it (checked here against the index it builds over a small real corpus)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy

from train.common.megatron_data import DataSource, build_dataset, corpus_reads

CORPUS = Path(__file__).parent / "fixtures" / "data" / "megatron" / "llama_text_document"  # 27 documents, 7,510 tokens
SEQ_LEN = 64


def built(tmp_path: Path, num_samples: int, seed: int = 42):
    source = DataSource(mock=False, prefix=CORPUS, fingerprint="f" * 64, tokenizer_fingerprint="t" * 64, eod=1,
                        tokenizer_vocab=514)
    return build_dataset(source, SEQ_LEN, num_samples, seed, tmp_path / "index_cache")


def test_a_corpus_read_nine_times_says_so_and_megatron_core_builds_nine_copies(tmp_path, capsys):
    dataset = built(tmp_path, 1000)  # 64,001 tokens asked of a corpus of 7,510
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[tprimat] data: ")]
    assert lines == ["[tprimat] data: the corpus of 117 sequences of 64 tokens (27 documents) is read 9 times for the "
                     "run's 1,000 samples: megatron-core shuffles the 9 copies of its documents together with SEED=42, "
                     "not each reading apart, so a document may come round again before another is read once; the "
                     "last reading, 62 of its 117 sequences, is shuffled apart"]
    order = dataset.document_index.tolist()
    assert set(Counter(order).values()) == {9} and len(set(order)) == 27
    assert sorted(order[-27:]) == list(range(27))  # the last reading, shuffled apart: each document once


def test_the_readings_are_shuffled_together_so_a_document_repeats_before_another_is_read_once(tmp_path):
    order = built(tmp_path, 1000).document_index.tolist()
    first_reading = order[:27]
    assert len(set(first_reading)) < 27  # not a permutation of the corpus: readings are mixed
    assert order == built(tmp_path / "again", 1000).document_index.tolist()  # the same SEED, the same order
    assert not numpy.array_equal(order, built(tmp_path / "other", 1000, seed=7).document_index)


def test_a_last_reading_mostly_unused_is_shuffled_apart_and_said_so():
    line = corpus_reads(documents=27, tokens=7510, seq_len=SEQ_LEN, num_samples=130, seed=1)
    assert line.endswith("is read 2 times for the run's 130 samples: megatron-core shuffles the 2 copies of its "
                         "documents together with SEED=1, not each reading apart, so a document may come round again "
                         "before another is read once; the last reading, 13 of its 117 sequences, is shuffled apart")


def test_a_corpus_read_once_says_nothing(tmp_path, capsys):
    built(tmp_path, 100)
    assert "[tprimat] data: " not in capsys.readouterr().out
    assert corpus_reads(documents=27, tokens=7510, seq_len=SEQ_LEN, num_samples=117, seed=1) is None
