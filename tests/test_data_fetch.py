"""data.fetch dataset: a seeded, streamed sample through `datasets`, offline against local directories laid out
like the Hub repositories (JSON-lines shards for C4, parquet shards for BookCorpus)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from utils.cli import WorkError
from data.fetch import PASSAGE_SENTENCES, Source, _passages, fetch_dataset
from tests.test_data_tokenizer import _raise, hub_error

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def c4_like(tmp_path_factory) -> Path:
    """allenai/c4's layout: en/c4-train.NNNNN-of-01024.json.gz shards of {"text", "timestamp", "url"}."""
    root = tmp_path_factory.mktemp("c4")
    (root / "en").mkdir()
    for shard in range(3):
        with gzip.open(root / "en" / f"c4-train.{shard:05d}-of-01024.json.gz", "wt", encoding="utf-8") as out:
            for i in range(40):
                out.write(json.dumps({"text": f"shard {shard} document {i}", "timestamp": "2019", "url": "u"}) + "\n")
    (root / "en" / "c4-validation.00000-of-00008.json.gz").write_bytes(gzip.compress(b'{"text": "validation"}\n'))
    return root


@pytest.fixture(scope="module")
def bc_like(tmp_path_factory) -> Path:
    """A script-free BookCorpus copy: parquet shards of one sentence per row."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    root = tmp_path_factory.mktemp("bc")
    (root / "data").mkdir()
    for shard in range(2):
        rows = [f"shard {shard} sentence {i} ." for i in range(300)]
        pq.write_table(pa.table({"text": rows}), root / "data" / f"train-{shard:05d}-of-00002.parquet")
    return root


def _fetch(name, repo, tmp_path, seed=1, samples=50, out="raw.jsonl"):
    output = tmp_path / out
    meta = fetch_dataset(name, output, samples=samples, seed=seed, repo=str(repo), buffer_size=64, progress=False)
    return [json.loads(line) for line in output.read_text().splitlines()], meta


def test_c4_takes_a_seeded_shuffled_sample_of_train_documents(c4_like, tmp_path):
    rows, meta = _fetch("c4", c4_like, tmp_path)
    again, _ = _fetch("c4", c4_like, tmp_path, out="again.jsonl")
    other, _ = _fetch("c4", c4_like, tmp_path, seed=2, out="other.jsonl")
    assert len(rows) == 50 and all(set(r) == {"text"} for r in rows)
    assert rows == again and rows != other
    texts = [r["text"] for r in rows]
    assert texts != sorted(texts, key=lambda t: (int(t.split()[1]), int(t.split()[3])))  # not the file order
    assert not any("validation" in t for t in texts)
    assert meta["records"] == 50 and meta["revision"].startswith("local-sha256:")
    assert json.loads((tmp_path / "raw.source.json").read_text()) == meta


def test_bookcorpus_records_are_passages_of_consecutive_sentences(bc_like, tmp_path):
    rows, meta = _fetch("bc", bc_like, tmp_path, samples=5)
    assert len(rows) == 5 and meta["record_kind"].startswith("passages")
    for row in rows:
        sentences = row["sentences"]
        shard, first = sentences[0].split()[1], int(sentences[0].split()[3])
        assert 0 < len(sentences) <= PASSAGE_SENTENCES
        assert sentences == [f"shard {shard} sentence {first + k} ." for k in range(len(sentences))]


def test_a_passage_never_crosses_a_marked_book_boundary():
    source = Source("bc", "x", None, "text", True, book_field="book")
    batch = {"text": ["a", "b", "c", "d"], "book": [1, 1, 2, 2]}
    assert _passages(batch, source) == {"sentences": [["a", "b"], ["c", "d"]]}


def test_the_bundled_sample_is_taken_whole_when_fewer_documents_than_asked(tmp_path):
    rows, meta = _fetch("sample", REPO / "data" / "sample" / "sample.jsonl.gz", tmp_path, samples=100_000)
    assert meta["records"] == len(rows) == 584


@pytest.mark.parametrize("kind, expected", [
    ("gated", "dataset allenai/c4 is gated and no HF_TOKEN was given: accept its terms at "
              "https://huggingface.co/datasets/allenai/c4"),
    ("missing", "dataset allenai/c4 was not found on the Hub"),
])
def test_hub_failures_are_one_line_each(monkeypatch, tmp_path, kind, expected):
    monkeypatch.setattr("huggingface_hub.HfApi.dataset_info", _raise(hub_error(kind)))
    with pytest.raises(WorkError) as err:
        fetch_dataset("c4", tmp_path / "raw.jsonl", samples=1, seed=1, progress=False)
    assert str(err.value).startswith(expected) and "\n" not in str(err.value)


def test_offline_with_a_hub_dataset_says_what_to_do(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-m", "data.fetch", "dataset", "--dataset", "c4", "--samples", "5",
                          "--seed", "1", "--output", str(tmp_path / "raw.jsonl"), "--quiet"],
                         cwd=REPO, env=env, capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stderr.strip() == ("data.fetch: error: the Hub is unreachable (or HF_HUB_OFFLINE=1) and allenai/c4 "
                                  "can only be streamed from it: connect to the Hub, or use DATASET=sample "
                                  "(bundled, offline)")
    assert not (tmp_path / "raw.jsonl").exists()


def test_the_sample_streams_without_importing_torch_and_leaves_use_torch_as_it_was(tmp_path):
    """datasets imports torch unless USE_TORCH says otherwise; streaming records needs none of it, and the variable
    is put back so that transformers, imported later in the same process, still sees torch."""
    code = ("import os, sys; from pathlib import Path; from data.fetch import fetch_dataset; "
            f"fetch_dataset('sample', Path({str(tmp_path / 'raw.jsonl')!r}), samples=3, seed=1, progress=False); "
            "print('torch' in sys.modules, os.environ.get('USE_TORCH'))")
    env = {key: value for key, value in os.environ.items() if key != "USE_TORCH"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "None"]
