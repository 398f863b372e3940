"""data.encode: the same bytes as Megatron-LM's preprocess_data.py, streaming, and never a finished-looking
pair from a killed run."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from data.encode import encode_file, load_encoder
from utils.files import tmp_path as partial
from tests.test_data_tokenizer import offline_tokenizer

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "data"
CORPUS = FIXTURES / "encode_corpus.jsonl"
SAMPLE = REPO / "data" / "sample" / "sample.jsonl.gz"


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.getbasetemp()
    return {m: offline_tokenizer(m, base) for m in ("llama", "qwen")}


@pytest.mark.parametrize("backend", ["tiktoken", "hf"])
@pytest.mark.parametrize("model", ["llama", "qwen"])
def test_output_is_byte_identical_to_megatron_preprocess_data(tokenizers, tmp_path, model, backend):
    stats = encode_file(CORPUS, tokenizers[model], str(tmp_path / model), keys=["text"], workers=2,
                        append_eod=True, backend=backend, progress=False)
    assert stats.backend.startswith(backend)
    for suffix in (".bin", ".idx"):
        ours = (tmp_path / f"{model}_text_document{suffix}").read_bytes()
        assert ours == (FIXTURES / "megatron" / f"{model}_text_document{suffix}").read_bytes(), suffix


def test_tiny_blocks_give_the_same_bytes(tokenizers, tmp_path):
    """Blocks are a streaming detail: 300-byte blocks (lines split across reads) change nothing."""
    encode_file(CORPUS, tokenizers["qwen"], str(tmp_path / "q"), keys=["text"], workers=2, append_eod=True,
                block_bytes=300, progress=False)
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"q_text_document{suffix}").read_bytes() == \
            (FIXTURES / "megatron" / f"qwen_text_document{suffix}").read_bytes()


@pytest.mark.parametrize("model", ["llama", "qwen"])
def test_tiktoken_ids_equal_hf_ids_on_the_test_corpora(tokenizers, model):
    """The proof that lets encode use tiktoken: same ids as the HF tokenizer on every text we ship."""
    encoder, _, backend = load_encoder(tokenizers[model], ["text"], True, "auto")
    assert backend == "tiktoken"
    texts = [json.loads(line)["text"] for line in gzip.open(SAMPLE, "rt", encoding="utf-8")]
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        value = json.loads(line)["text"]
        texts.extend(value if isinstance(value, list) else [value])
    fast = [encoder.twin.encode(t) for t in texts]
    slow = encoder.hf_ids(texts)
    assert sum(f is None for f in fast) == 1  # only the document holding special-token text goes to HF
    assert all(f is None or np.array_equal(f, s) for f, s in zip(fast, slow))


def test_a_bad_line_is_reported_with_its_number(tokenizers, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": "fine"}\n{"txt": "wrong key"}\n')
    out = subprocess.run([sys.executable, "-m", "data.encode", "--input", str(bad), "--tokenizer-model",
                          str(tokenizers["qwen"]), "--output-prefix", str(tmp_path / "b"), "--workers", "1",
                          "--append-eod", "--quiet"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == \
        f"data.encode: error: --input {bad}: line 3 is not a JSON object with text (no field 'text')"
    assert not list(tmp_path.glob("b_*"))


def test_a_killed_encode_leaves_no_finished_looking_pair_and_a_rerun_starts_clean(tokenizers, tmp_path):
    texts = [json.loads(line)["text"] for line in gzip.open(SAMPLE, "rt", encoding="utf-8")]
    big = tmp_path / "big.jsonl"
    with open(big, "w", encoding="utf-8") as handle:
        for i in range(8):  # ~9 MB: long enough to be killed in the middle
            for text in texts:
                handle.write(json.dumps({"text": f"{i} {text}"}) + "\n")
    prefix = tmp_path / "k"
    bin_path, idx_path = Path(f"{prefix}_text_document.bin"), Path(f"{prefix}_text_document.idx")
    bin_path.write_bytes(b"old")  # a finished pair from an earlier run must not survive next to new data
    idx_path.write_bytes(b"old")
    command = [sys.executable, "-m", "data.encode", "--input", str(big), "--tokenizer-model", str(tokenizers["qwen"]),
               "--output-prefix", str(prefix), "--workers", "1", "--append-eod", "--quiet"]
    proc = subprocess.Popen(command, cwd=REPO, start_new_session=True)
    deadline = time.monotonic() + 120
    while not (partial(bin_path).exists() and partial(bin_path).stat().st_size > 0):
        assert proc.poll() is None and time.monotonic() < deadline, "encode ended before it could be killed"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not bin_path.exists() and not idx_path.exists()
    command[command.index("--input") + 1] = str(CORPUS)  # a short rerun: it must clear the partial files
    assert subprocess.run(command, cwd=REPO).returncode == 0
    assert bin_path.exists() and idx_path.exists()
    assert not partial(bin_path).exists() and not partial(idx_path).exists()
