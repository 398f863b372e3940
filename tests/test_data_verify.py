"""data.verify: a sound pair passes and gets its manifest; each corruption is caught, naming file, check, index."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from data import verify as verify_module
from data.encode import encode_file
from data.verify import Broken, _tokenizer_facts, check_pair
from tests.test_data_tokenizer import offline_tokenizer

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "data" / "sample" / "sample.jsonl.gz"


def sound_pair(tmp_path_factory, model: str) -> tuple[Path, Path]:
    """A pair of 40 sample documents encoded as data.encode does for MODEL, and its tokenizer."""
    tokenizer = offline_tokenizer(model, tmp_path_factory.getbasetemp())
    work = tmp_path_factory.mktemp(f"verify-{model}")
    corpus = work / "corpus.jsonl"
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as lines, open(corpus, "w", encoding="utf-8") as out:
        for _, line in zip(range(40), lines):
            out.write(json.dumps({"text": json.loads(line)["text"]}) + "\n")
    encode_file(corpus, tokenizer, str(work / "good"), keys=["text"], workers=1, append_eod=True, progress=False,
                cache=work / "proofs")
    return work / "good_text_document", tokenizer


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> tuple[Path, Path]:
    """A sound qwen pair, and its tokenizer."""
    return sound_pair(tmp_path_factory, "qwen")


@pytest.fixture(scope="module")
def good_llama(tmp_path_factory) -> tuple[Path, Path]:
    """A sound llama pair (its documents start with BOS 128000), and its tokenizer."""
    return sound_pair(tmp_path_factory, "llama")


def corrupt(good: tuple[Path, Path], tmp_path: Path, change) -> tuple[Path, Path]:
    """A copy of the good pair with `change(bin_bytes, idx_bytearray)` applied; returns (bin, idx)."""
    prefix, _ = good
    raw_bin, raw_idx = Path(f"{prefix}.bin").read_bytes(), bytearray(Path(f"{prefix}.idx").read_bytes())
    raw_bin = change(raw_bin, raw_idx) or raw_bin
    (tmp_path / "x.bin").write_bytes(raw_bin)
    (tmp_path / "x.idx").write_bytes(bytes(raw_idx))
    return tmp_path / "x.bin", tmp_path / "x.idx"


def _counts(idx: bytearray) -> tuple[int, int]:
    return struct.unpack_from("<QQ", idx, 18)


def _truncate(b, i):
    return b[:-4]


def _magic(b, i):
    i[0:9] = b"MMIDIDY\x00\x00"


def _version(b, i):
    i[9:17] = struct.pack("<Q", 2)


def _dtype(b, i):
    i[17] = 8  # uint16: wrong for a 151665-token vocabulary


def _pointer(b, i):
    s, _ = _counts(i)
    struct.pack_into("<q", i, 34 + 4 * s + 8 * 3, 12345)  # pointer of sequence 3


def _order(b, i):
    s, d = _counts(i)
    at = 34 + 12 * s + 8 * 5
    a, c = struct.unpack_from("<qq", i, at)
    struct.pack_into("<qq", i, at, c, a)  # entries 5 and 6 swapped


def _token(b, i):
    tokens = np.frombuffer(b, np.int32).copy()
    tokens[100] = 151665
    return tokens.tobytes()


def _eod(b, i):
    s, _ = _counts(i)
    lengths = np.frombuffer(bytes(i), np.int32, s, 34)
    tokens = np.frombuffer(b, np.int32).copy()
    tokens[int(lengths[:8].sum()) - 1] = 11  # the last token of document 7
    return tokens.tobytes()


def _empty(b, i):
    s, _ = _counts(i)
    at = 34 + 12 * s + 8 * 4
    struct.pack_into("<q", i, at, struct.unpack_from("<q", i, at - 8)[0])  # document 3 ends where it starts


CORRUPTIONS = {
    "truncated .bin": (_truncate, "x.bin", "truncated .bin"),
    "wrong magic": (_magic, "x.idx", "wrong magic"),
    "wrong version": (_version, "x.idx", "wrong version: 2"),
    "wrong dtype code": (_dtype, "x.idx", "wrong dtype code: 8, expected 4"),
    "pointer mismatch": (_pointer, "x.idx", "pointer mismatch: sequence 3"),
    "document index out of order": (_order, "x.idx", "document index out of order: entry 6"),
    "token id >= vocabulary": (_token, "x.bin", "token id >= vocabulary: token 100 is 151665"),
    "missing EOD": (_eod, "x.bin", "missing EOD: document 7"),
    "empty document": (_empty, "x.idx", "empty document: document 3"),
}


def test_the_good_pair_passes(good):
    prefix, tokenizer = good
    summary = check_pair(Path(f"{prefix}.bin"), Path(f"{prefix}.idx"), *_tokenizer_facts(tokenizer))
    assert summary.documents == 40 and summary.max_token_id == 151643 and summary.dtype == "int32"


def _bos(b, i):
    s, _ = _counts(i)
    lengths = np.frombuffer(bytes(i), np.int32, s, 34)
    tokens = np.frombuffer(b, np.int32).copy()
    tokens[int(lengths[:5].sum())] = 9906  # the first token of document 5
    return tokens.tobytes()


def test_a_document_without_the_bos_its_tokenizer_adds_is_caught(good_llama, tmp_path):
    bin_path, idx_path = corrupt(good_llama, tmp_path, _bos)
    with pytest.raises(Broken, match=r"x\.bin: missing BOS: document 5 starts with 9906, not BOS 128000"):
        check_pair(bin_path, idx_path, *_tokenizer_facts(good_llama[1]))
    prefix, tokenizer = good_llama
    assert check_pair(Path(f"{prefix}.bin"), Path(f"{prefix}.idx"), *_tokenizer_facts(tokenizer)).documents == 40


def copy_pair(good: tuple[Path, Path], directory: Path) -> Path:
    prefix = directory / "sample_qwen_text_document"
    for suffix in (".bin", ".idx"):
        shutil.copyfile(f"{good[0]}{suffix}", f"{prefix}{suffix}")
    return prefix


def verify_cli(prefix: Path, tokenizer: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "data.verify", "--prefix", str(prefix), "--tokenizer", str(tokenizer),
                           "--seq-length", "64", "--samples", "10"], cwd=REPO, capture_output=True, text=True)


def test_verifying_a_changed_pair_again_says_which_hashes_changed_and_drops_stale_sample_indices(good, tmp_path):
    prefix = copy_pair(good, tmp_path)
    first = verify_cli(prefix, good[1])
    assert first.returncode == 0 and "CHANGED" not in first.stderr
    old = json.loads(Path(f"{prefix}.manifest.json").read_text())["files"]["bin"]["sha256"]
    stale = prefix / "cache" / "GPTDataset_indices"  # where NeMo and Primus cache sample indices by path
    stale.mkdir(parents=True)
    (stale / "abc-GPTDataset-train-sample_index.npy").write_bytes(b"old")
    tokens = np.fromfile(f"{prefix}.bin", np.int32)
    tokens[[3, 4]] = tokens[[4, 3]]  # still a sound pair, but other data
    tokens.tofile(f"{prefix}.bin")
    second = verify_cli(prefix, good[1])
    assert second.returncode == 0, second.stderr
    new = json.loads(Path(f"{prefix}.manifest.json").read_text())["files"]["bin"]["sha256"]
    assert f"CHANGED since the last verification: .bin sha256 {old} -> {new}" in second.stderr
    assert ".idx sha256" in second.stderr and "CHANGED since the last verification: .idx" not in second.stderr
    assert not stale.exists()


def test_a_pair_changed_while_it_is_verified_gets_no_manifest(good, tmp_path, monkeypatch):
    prefix = copy_pair(good, tmp_path)
    checked = verify_module.check_pair

    def check_then_change(bin_path, *args):
        summary = checked(bin_path, *args)
        time.sleep(0.05)  # past the file clock's tick
        with open(bin_path, "r+b") as handle:  # another process rewrites a token, same size
            handle.write(b"\x07\x00\x00\x00")
        return summary

    monkeypatch.setattr(verify_module, "check_pair", check_then_change)
    with pytest.raises(Broken, match=r"\.bin: changed during verification"):
        verify_module.verify(prefix, good[1], clean_report=None, seq_length=64, samples=10, seed=1)
    assert not Path(f"{prefix}.manifest.json").exists()


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_each_corruption_is_caught(good, tmp_path, name):
    change, broken_file, expected = CORRUPTIONS[name]
    bin_path, idx_path = corrupt(good, tmp_path, change)
    with pytest.raises(Broken) as err:
        check_pair(bin_path, idx_path, *_tokenizer_facts(good[1]))
    assert str(err.value).startswith(f"{tmp_path / broken_file}: {expected}")


def test_cli_writes_the_manifest_after_building_gpt_samples(good, tmp_path):
    prefix, tokenizer = good
    report = tmp_path / "clean.report.json"
    report.write_text(json.dumps({"kept": 40, "source": {"dataset": "sample", "repo": "r", "revision": "v"}}))
    out = subprocess.run([sys.executable, "-m", "data.verify", "--prefix", str(prefix), "--tokenizer", str(tokenizer),
                          "--clean-report", str(report), "--seq-length", "64", "--samples", "100"],
                         cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "GPTDataset" in out.stderr and "fingerprint" in out.stderr
    assert "not installed" not in out.stderr  # megatron-core's kernel-library warnings: utils/missing_stacks.py
    manifest = json.loads(Path(f"{prefix}.manifest.json").read_text())
    shas = [hashlib.sha256(Path(f"{prefix}{s}").read_bytes()).hexdigest() for s in (".bin", ".idx")]
    assert manifest["fingerprint"] == hashlib.sha256("\n".join(shas).encode()).hexdigest()
    assert [manifest["files"]["bin"]["sha256"], manifest["files"]["idx"]["sha256"]] == shas
    assert manifest["verified"] is True and manifest["dataset"] == "sample"
    assert manifest["source"]["revision"] == "v" and manifest["cleaning"] == {"kept": 40}
    assert manifest["tokenizer"]["sha256"] and manifest["tokenizer"]["fallback"] is True
    # the two facts every training rank needs of the tokenizer, so that none loads it (train/common/megatron_data.py)
    from train.common.megatron_data import read_tokenizer
    assert (manifest["tokenizer"]["eos_id"], manifest["tokenizer"]["vocab_size"]) == read_tokenizer(Path(tokenizer))
    assert manifest["counts"]["documents"] == 40 and manifest["statistics"]["gpt_samples"] >= 100


def test_cli_exits_1_on_a_broken_pair_and_2_on_bad_arguments(good, tmp_path):
    prefix, tokenizer = good
    bin_path, _ = corrupt(good, tmp_path, _eod)
    base = [sys.executable, "-m", "data.verify", "--tokenizer", str(tokenizer)]
    out = subprocess.run(base + ["--prefix", str(bin_path.with_suffix(""))], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 1 and "missing EOD: document 7" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "x.manifest.json").exists()
    out = subprocess.run(base + ["--prefix", str(prefix), "--clean-report", str(tmp_path / "nope.json")],
                         cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 2 and "--clean-report" in out.stderr
