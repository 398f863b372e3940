"""Nothing trains on, or is fingerprinted as, data that is not what data.verify verified.

A pair corrupted after verification (a flipped byte, an EOD replaced, a token beyond the vocabulary, a
truncated .bin, an .idx swapped with another pair's), another model's pair under this model's name, a
tokenizer changed after verification or a manifest edited by hand: each is refused before any model is
built, by the one check the launcher (for every framework), the plan check and the trainer share, naming
the file and ./shell/run_data.sh. The dataset fingerprint is always that of the files as they are.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from utils import datafiles
from data.encode import encode_file
from utils.datafiles import DataProblem, check_vocabulary, prove, prove_pair
from data.verify import verify
from utils.fingerprint import dataset_fingerprint
from tests.fixtures.train_matrix.requests import node, run_request
from tests.test_data_tokenizer import offline_tokenizer
from train.common.megatron_data import DataError, DatasetTokenizer, locate
from train.plan import data_problems
from utils.spec.models import get_model
from utils.spec.request import Data

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "data" / "sample" / "sample.jsonl.gz"
QWEN, LLAMA = get_model("qwen"), get_model("llama")


@pytest.fixture(scope="module")
def verified_dir(tmp_path_factory) -> Path:
    """A DATA_DIR as ./shell/run_data.sh leaves it: 40 sample documents for qwen and for llama, verified."""
    base = tmp_path_factory.getbasetemp()
    root = tmp_path_factory.mktemp("verified")
    corpus = root / "corpus.jsonl"
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as lines, open(corpus, "w", encoding="utf-8") as out:
        for _, line in zip(range(40), lines):
            out.write(json.dumps({"text": json.loads(line)["text"]}) + "\n")
    for model in ("qwen", "llama"):
        tokenizer = root / "tokenizers" / model
        shutil.copytree(offline_tokenizer(model, base), tokenizer)
        encode_file(corpus, tokenizer, str(root / f"sample_{model}"), keys=["text"], workers=1, append_eod=True,
                    progress=False, cache=root / "proofs")
        verify(root / f"sample_{model}_text_document", tokenizer, clean_report=None, seq_length=64, samples=10,
               seed=1)
    corpus.unlink()
    return root


@pytest.fixture
def data_dir(verified_dir, tmp_path) -> Path:
    """A private copy of the verified DATA_DIR, files older than the racy window (as data prepared earlier is)."""
    copy = tmp_path / "data"
    shutil.copytree(verified_dir, copy)
    return copy


def qwen(data_dir: Path, suffix: str = "") -> Path:
    return data_dir / f"sample_qwen_text_document{suffix}"


def patch_bin(data_dir: Path, change) -> None:
    """Apply change(tokens) to the qwen .bin's int32 tokens in place; change may return a shorter byte string."""
    path = qwen(data_dir, ".bin")
    tokens = np.fromfile(path, dtype=np.int32)
    raw = change(tokens)
    path.write_bytes(tokens.tobytes() if raw is None else raw)


def flipped_byte(data_dir):
    path = qwen(data_dir, ".bin")
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))


def removed_eod(data_dir):
    def change(tokens):
        tokens[-1] = 0
    patch_bin(data_dir, change)


def token_beyond_vocabulary(data_dir):
    def change(tokens):
        tokens[5] = QWEN.vocab_size + 10
    patch_bin(data_dir, change)


def truncated_by_1000_bytes(data_dir):
    patch_bin(data_dir, lambda tokens: tokens.tobytes()[:-1000])


def idx_swapped_with_llamas(data_dir):
    shutil.copyfile(data_dir / "sample_llama_text_document.idx", qwen(data_dir, ".idx"))


def idx_swapped_same_size(data_dir):
    """An .idx of the same size and header whose pointers are shifted: only the hash can tell."""
    path = qwen(data_dir, ".idx")
    raw = bytearray(path.read_bytes())
    raw[-9] ^= 0x01
    path.write_bytes(bytes(raw))


CORRUPTIONS = [flipped_byte, removed_eod, token_beyond_vocabulary, truncated_by_1000_bytes, idx_swapped_with_llamas,
               idx_swapped_same_size]


def sample_data(data_dir: Path, model: str) -> Data:
    """The data section of a mega run's request over the sample pair, as the launcher writes it."""
    return run_request("cpu", "mega", model, DATA_DIR=str(data_dir), DATASET="sample", MODELS=model).data


def config(data_dir: Path, models: str = "qwen"):
    return node("cpu", 0, DATA_DIR=str(data_dir), DATASET="sample", MODELS=models)


def test_the_verified_pair_is_proven_and_fingerprinted_by_its_files(data_dir):
    manifest = json.loads(qwen(data_dir, ".manifest.json").read_text())
    assert data_problems(config(data_dir)) == []
    proven = prove(qwen(data_dir), data_dir / "tokenizers" / "qwen", "qwen", QWEN.vocab_size)
    assert proven.fingerprint == manifest["fingerprint"]
    source = locate(sample_data(data_dir, "qwen"), QWEN)
    assert (source.fingerprint, source.tokenizer_fingerprint) == (manifest["fingerprint"],
                                                                  manifest["tokenizer"]["sha256"])
    assert dataset_fingerprint(qwen(data_dir)) == {"fingerprint": manifest["fingerprint"], "source": "verified",
                                                   "tokenizer_fingerprint": manifest["tokenizer"]["sha256"],
                                                   "verified": True}


def test_each_rank_takes_the_tokenizers_two_facts_from_the_manifest_where_data_verify_recorded_them(data_dir,
                                                                                                   monkeypatch):
    """Loading Llama's tokenizer was 0.5 s of every run's start: its files are proven by sha256, so what data.verify
    read of them stands; a manifest from before data.verify recorded them is answered by the tokenizer itself."""
    from train.common import megatron_data

    eos, vocab = megatron_data.read_tokenizer(data_dir / "tokenizers" / "qwen")
    path = qwen(data_dir, ".manifest.json")
    manifest = json.loads(path.read_text())
    manifest["tokenizer"].update(eos_id=eos, vocab_size=vocab)
    path.write_text(json.dumps(manifest))
    monkeypatch.setattr(megatron_data, "read_tokenizer", lambda directory: pytest.fail("the tokenizer was loaded"))
    source = locate(sample_data(data_dir, "qwen"), QWEN)
    assert (source.eod, source.tokenizer_vocab) == (eos, vocab)
    manifest["tokenizer"].pop("eos_id")
    path.write_text(json.dumps(manifest))
    monkeypatch.setattr(megatron_data, "read_tokenizer", lambda directory: (eos, vocab - 1))
    assert locate(sample_data(data_dir, "qwen"), QWEN).tokenizer_vocab == vocab - 1


@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=lambda f: f.__name__)
def test_a_pair_corrupted_after_verification_is_refused_and_never_carries_the_clean_fingerprint(data_dir, corrupt,
                                                                                                   monkeypatch):
    monkeypatch.setattr(datafiles, "RACY_NS", 0)
    clean = json.loads(qwen(data_dir, ".manifest.json").read_text())["fingerprint"]
    prove_pair(qwen(data_dir))  # remembered hashes from before the corruption must not vouch for it
    corrupt(data_dir)
    (problem,) = data_problems(config(data_dir))
    assert problem.startswith(f"qwen: {data_dir}/sample_qwen_text_document.") and "./shell/run_data.sh" in problem
    assert "\n" not in problem
    with pytest.raises(DataError, match=r"sample_qwen_text_document\.(bin|idx): .*\./shell/run_data\.sh"):
        locate(sample_data(data_dir, "qwen"), QWEN)
    found = dataset_fingerprint(qwen(data_dir))
    assert found["verified"] is False and found["fingerprint"] != clean
    assert found["fingerprint"] == dataset_fingerprint(qwen(data_dir), compute=True)["fingerprint"]


def test_touch_restoring_the_mtime_does_not_hide_a_change(data_dir, monkeypatch):
    monkeypatch.setattr(datafiles, "RACY_NS", 0)
    assert prove_pair(qwen(data_dir)).hashed is True
    assert prove_pair(qwen(data_dir)).hashed is False  # remembered: no second full hash
    path = qwen(data_dir, ".bin")
    before = path.stat()
    with open(path, "r+b") as handle:
        handle.seek(100)
        byte = handle.read(1)
        handle.seek(100)
        handle.write(bytes([byte[0] ^ 0x01]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # `touch -d` back to the verified mtime
    assert path.stat().st_mtime_ns == before.st_mtime_ns and path.stat().st_size == before.st_size
    with pytest.raises(DataProblem, match=r"\.bin: sha256 .* is not the .* data\.verify verified"):
        prove_pair(qwen(data_dir))


def test_a_file_changed_within_the_racy_window_is_hashed_again_next_time(data_dir):
    os.utime(qwen(data_dir, ".bin"))  # ctime now: within RACY_NS of the next hash
    assert prove_pair(qwen(data_dir)).hashed is True
    assert prove_pair(qwen(data_dir)).hashed is True
    remembered = qwen(data_dir, ".hashed.json")
    assert not remembered.exists() or ".bin" not in json.loads(remembered.read_text())["files"]


def test_qwens_pair_renamed_as_llamas_is_a_data_error_before_the_model_is_built(data_dir):
    for suffix in (".bin", ".idx", ".manifest.json"):
        os.replace(qwen(data_dir, suffix), data_dir / f"sample_llama_text_document{suffix}")
    (problem,) = data_problems(config(data_dir, "llama"))
    assert "encoded with the qwen tokenizer, not llama's" in problem and "./shell/run_data.sh" in problem
    with pytest.raises(DataError, match="qwen tokenizer"):
        locate(sample_data(data_dir, "llama"), LLAMA)


def test_llama70b_reads_llamas_verified_pair_and_tokenizer(data_dir):
    """One preparation serves both: the layout names llama's files, and the proof accepts them for llama70b."""
    assert datafiles.data_prefix(str(data_dir), "sample", "llama70b") == data_dir / "sample_llama_text_document"
    assert datafiles.tokenizer_dir(str(data_dir), "llama70b") == data_dir / "tokenizers" / "llama"
    assert datafiles.encode_prefix(str(data_dir), "sample", "llama70b") == data_dir / "sample_llama"
    assert data_problems(config(data_dir, "llama70b")) == []
    big = get_model("llama70b", "tiny")
    assert locate(sample_data(data_dir, "llama70b"), big).fingerprint == \
        locate(sample_data(data_dir, "llama"), get_model("llama", "tiny")).fingerprint


def test_llamas_pair_renamed_as_mistrals_is_refused(data_dir):
    for suffix in (".bin", ".idx", ".manifest.json"):
        os.replace(data_dir / f"sample_llama_text_document{suffix}", data_dir / f"sample_mistral_text_document{suffix}")
    with pytest.raises(DataProblem, match="encoded with the llama tokenizer, not mistral's"):
        prove(data_dir / "sample_mistral_text_document", data_dir / "tokenizers" / "llama", "mistral", 32000)
    with pytest.raises(DataProblem, match="not llama70b's, llama70b uses llama's"):
        prove(qwen(data_dir), data_dir / "tokenizers" / "qwen", "llama70b", QWEN.vocab_size)


def test_token_ids_beyond_the_models_vocabulary_are_named(data_dir):
    proven = prove_pair(qwen(data_dir))
    with pytest.raises(DataProblem, match=r"token ids up to 151643, beyond llama's vocabulary of 128256"):
        check_vocabulary(proven, "llama", LLAMA.vocab_size)


def test_a_tokenizer_changed_after_verification_is_refused(data_dir):
    config_file = data_dir / "tokenizers" / "qwen" / "tokenizer_config.json"
    config_file.write_text(config_file.read_text().replace("<|endoftext|>", "<|im_end|>", 1))
    (problem,) = data_problems(config(data_dir))
    assert "tokenizers/qwen: the tokenizer files are not those that encoded" in problem


@pytest.mark.parametrize("edit, says", [
    (lambda m: {"verified": True}, "not a manifest data.verify"),
    (lambda m: {**m, "files": ["a.bin", "a.idx"]}, "files.bin.sha256, files.idx.sha256, files.*.bytes missing"),
    (lambda m: {**m, "fingerprint": "f" * 64}, "its fingerprint is not that of the file hashes"),
    (lambda m: {**m, "verified": False}, "does not say verified"),
])
def test_a_manifest_edited_by_hand_is_refused(data_dir, edit, says):
    path = qwen(data_dir, ".manifest.json")
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))
    (problem,) = data_problems(config(data_dir))
    assert says in problem


def test_encoding_over_a_verified_prefix_first_takes_its_verification_away(data_dir):
    """The manifest, the remembered hashes and the sample indices NeMo and Primus cached under the prefix."""
    prove_pair(qwen(data_dir))
    stale = qwen(data_dir) / "cache" / "GPTDataset_indices"
    stale.mkdir(parents=True)
    corpus = data_dir / "one.jsonl"
    corpus.write_text('{"text": "A new document."}\n')
    encode_file(corpus, data_dir / "tokenizers" / "qwen", str(data_dir / "sample_qwen"), keys=["text"], workers=1,
                append_eod=True, progress=False, cache=data_dir / "proofs")
    assert not qwen(data_dir, ".manifest.json").exists() and not qwen(data_dir, ".hashed.json").exists()
    assert not stale.exists()
    (problem,) = data_problems(config(data_dir))
    assert problem == f"qwen: sample_qwen_text_document.manifest.json missing in {data_dir}; prepare it: ./shell/run_data.sh"


def test_megatrons_sample_index_cache_is_named_after_the_dataset_fingerprint():
    """A cached sample index built from other contents at the same path is never reused."""
    one, other = DatasetTokenizer(1, 10, "t", "a" * 64), DatasetTokenizer(1, 10, "t", "b" * 64)
    assert one.unique_identifiers != other.unique_identifiers


def test_a_launch_on_a_corrupted_pair_is_refused_in_one_line_before_a_run_directory_exists(data_dir, tmp_path):
    flipped_byte(data_dir)
    env = {**os.environ, "DATA_DIR": str(data_dir), "DATASET": "sample", "OUTPUT_DIR": str(tmp_path / "out")}
    out = subprocess.run([sys.executable, "-m", "train.launch.run", "--platform", "cpu", "--framework", "mega",
                          "--model", "qwen"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.splitlines()
    assert "sample_qwen_text_document.bin: sha256" in line and "./shell/run_data.sh" in line
    assert not (tmp_path / "out").exists()


def test_a_megatron_core_wheels_compile_helpers_cannot_make_what_it_ships_built_and_is_answered_without_make(
        monkeypatch):
    """megatron-core 0.19.2 datasets/utils.py:20-30 runs make in a folder its wheel ships without a Makefile (and with
    helpers_cpp built), and exits 1 when make fails: Megatron-LM's and Megatron-Bridge's start-up call it."""
    from megatron.core.datasets import utils as dataset_utils

    folder = Path(dataset_utils.__file__).parent
    assert not (folder / "Makefile").exists() and list(folder.glob("helpers_cpp*.so"))
    with pytest.raises(SystemExit):
        dataset_utils.compile_helpers()
    monkeypatch.setattr(dataset_utils, "compile_helpers", dataset_utils.compile_helpers)  # put back after the test
    monkeypatch.setattr(subprocess, "run", lambda *args, **kwargs: pytest.fail("make ran"))
    assert "megatron.core.datasets.utils" in datafiles.answer_compile_helpers()
    dataset_utils.compile_helpers()  # answered: helpers_cpp imports, no make


def test_where_the_dataset_helpers_are_not_compiled_upstreams_make_is_left_to_build_them(monkeypatch):
    from megatron.core.datasets import utils as dataset_utils

    upstream = dataset_utils.compile_helpers
    monkeypatch.setattr(datafiles, "_helpers_importable", lambda: False)
    assert datafiles.answer_compile_helpers() == [] and dataset_utils.compile_helpers is upstream
