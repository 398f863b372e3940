"""data.encode: the same bytes as Megatron-LM's preprocess_data.py, streaming, never a finished-looking pair
from a killed run, and the tiktoken proof made once per tokenizer so that encoding needs no transformers."""

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

import data.bpe
from data.encode import encode_file, load_encoder, main
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


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """The proof cache the tests share (XDG_CACHE_HOME for the subprocesses), so each tokenizer is proven once."""
    return tmp_path_factory.mktemp("xdg-cache")


def proofs(cache: Path) -> Path:
    return cache / "tprimat" / "tokenizer-proofs"


def same_as_megatron(prefix: Path, model: str) -> bool:
    return all(Path(f"{prefix}_text_document{suffix}").read_bytes()
               == (FIXTURES / "megatron" / f"{model}_text_document{suffix}").read_bytes()
               for suffix in (".bin", ".idx"))


def encode_command(tokenizer: Path, prefix: Path, *extra: str, corpus: Path = CORPUS) -> list[str]:
    return [sys.executable, "-m", "data.encode", "--input", str(corpus), "--tokenizer-model", str(tokenizer),
            "--output-prefix", str(prefix), "--workers", "2", "--append-eod", "--quiet", *extra]


@pytest.mark.parametrize("backend", ["tiktoken", "hf"])
@pytest.mark.parametrize("model", ["llama", "qwen"])
def test_output_is_byte_identical_to_megatron_preprocess_data(tokenizers, cache, tmp_path, model, backend):
    stats = encode_file(CORPUS, tokenizers[model], str(tmp_path / model), keys=["text"], workers=2,
                        append_eod=True, backend=backend, progress=False, cache=proofs(cache))
    assert stats.backend.startswith(backend)
    assert same_as_megatron(tmp_path / model, model)


def test_tiny_blocks_give_the_same_bytes(tokenizers, cache, tmp_path):
    """Blocks are a streaming detail: 300-byte blocks (lines split across reads) change nothing."""
    encode_file(CORPUS, tokenizers["qwen"], str(tmp_path / "q"), keys=["text"], workers=2, append_eod=True,
                block_bytes=300, progress=False, cache=proofs(cache))
    assert same_as_megatron(tmp_path / "q", "qwen")


@pytest.mark.parametrize("model", ["llama", "qwen"])
def test_the_megatron_include_special_tokens_flag_is_accepted_and_changes_nothing(tokenizers, cache, tmp_path,
                                                                                 monkeypatch, model):
    """A command copied from Megatron-LM core_v0.16.1 runs unchanged: TPrimat always keeps the BOS."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    assert main(encode_command(tokenizers[model], tmp_path / "flag", "--tokenizer-hf-include-special-tokens")[3:]) == 0
    assert main(encode_command(tokenizers[model], tmp_path / "default")[3:]) == 0
    assert same_as_megatron(tmp_path / "flag", model) and same_as_megatron(tmp_path / "default", model)
    usage = " ".join(subprocess.run([sys.executable, "-m", "data.encode", "--help"], cwd=REPO, capture_output=True,
                                    text=True).stdout.split())
    assert ("--tokenizer-hf-include-special-tokens accepted so that commands written for Megatron-LM core_v0.16.1 "
            "run unchanged; it changes nothing.") in usage
    assert "as Megatron-LM's main branch does by default; core_v0.16.1 does so only with this flag and drops the " \
           "BOS without it" in usage


@pytest.mark.parametrize("model", ["llama", "qwen"])
def test_tiktoken_ids_equal_hf_ids_on_the_test_corpora(tokenizers, cache, model):
    """The proof that lets encode use tiktoken: same ids as the HF tokenizer on every text we ship."""
    encoder, backend = load_encoder(tokenizers[model], ["text"], True, "auto", proofs(cache))
    assert backend == "tiktoken"
    texts = [json.loads(line)["text"] for line in gzip.open(SAMPLE, "rt", encoding="utf-8")]
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        value = json.loads(line)["text"]
        texts.extend(value if isinstance(value, list) else [value])
    fast = [encoder.twin.encode(t) for t in texts]
    slow = encoder.hf_ids(texts)
    assert sum(f is None for f in fast) == 1  # only the document holding special-token text goes to HF
    assert all(f is None or np.array_equal(f, s) for f, s in zip(fast, slow))


def test_with_its_proof_cached_encode_imports_neither_transformers_nor_torch(tokenizers, cache, tmp_path):
    """What makes start-up a fraction of a second: -X importtime lists every module the process imported."""
    encode_file(CORPUS, tokenizers["llama"], str(tmp_path / "first"), keys=["text"], workers=1, append_eod=True,
                progress=False, cache=proofs(cache))
    out = subprocess.run([sys.executable, "-X", "importtime", *encode_command(tokenizers["llama"], tmp_path / "l")[1:]],
                         cwd=REPO, env={**os.environ, "XDG_CACHE_HOME": str(cache)}, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    imported = {line.split("|")[-1].strip().split(".")[0] for line in out.stderr.splitlines()
                if line.startswith("import time:")}
    assert "tiktoken" in imported and not imported & {"transformers", "torch"}
    assert "proved" not in out.stderr and same_as_megatron(tmp_path / "l", "llama")


def test_a_changed_tokenizer_is_proven_again(tokenizers, cache, tmp_path):
    """The proof is keyed by the tokenizer files' sha256: a new EOS in tokenizer_config.json must reach the output."""
    changed = tmp_path / "qwen-im-end"
    changed.mkdir()
    for path in tokenizers["qwen"].iterdir():
        changed.joinpath(path.name).write_bytes(path.read_bytes())
    config = json.loads((changed / "tokenizer_config.json").read_text())
    config["eos_token"] = "<|im_end|>"  # 151645 instead of <|endoftext|> 151643
    (changed / "tokenizer_config.json").write_text(json.dumps(config))
    encode_file(CORPUS, tokenizers["qwen"], str(tmp_path / "before"), keys=["text"], workers=1, append_eod=True,
                progress=False, cache=proofs(cache))
    entries = set(proofs(cache).iterdir())
    encode_file(CORPUS, changed, str(tmp_path / "after"), keys=["text"], workers=1, append_eod=True,
                progress=False, cache=proofs(cache))
    assert len(set(proofs(cache).iterdir()) - entries) == 1
    ours = np.fromfile(tmp_path / "after_text_document.bin", dtype=np.int32)
    theirs = np.fromfile(FIXTURES / "megatron" / "qwen_text_document.bin", dtype=np.int32)
    assert (ours == 151645).sum() == 24  # every non-empty document's EOD
    assert np.array_equal(np.where(ours == 151645, 151643, ours), theirs)


def test_a_damaged_cached_proof_is_made_again(tokenizers, tmp_path):
    encode_file(CORPUS, tokenizers["qwen"], str(tmp_path / "a"), keys=["text"], workers=1, append_eod=True,
                progress=False, cache=tmp_path / "proofs")
    [entry] = (tmp_path / "proofs").iterdir()
    (entry / "proof.json").write_text('{"eos_id": 1')
    encode_file(CORPUS, tokenizers["qwen"], str(tmp_path / "b"), keys=["text"], workers=1, append_eod=True,
                progress=False, cache=tmp_path / "proofs")
    assert json.loads((entry / "proof.json").read_text())["eos_id"] == 151643
    assert same_as_megatron(tmp_path / "b", "qwen")


def test_the_proof_refuses_tiktoken_when_its_ids_differ(tokenizers, tmp_path, monkeypatch):
    """A twin that misses Llama's BOS disagrees on the first proof text: encode then uses the HF tokenizer."""
    spec_of = data.bpe.twin_spec

    def without_bos(backend):
        spec, ranks, why = spec_of(backend)
        return {**spec, "prefix": []}, ranks, why
    monkeypatch.setattr(data.bpe, "twin_spec", without_bos)
    stats = encode_file(CORPUS, tokenizers["llama"], str(tmp_path / "l"), keys=["text"], workers=2, append_eod=True,
                        progress=False, cache=tmp_path / "proofs")
    assert stats.backend == f"hf (tiktoken and the HF tokenizer disagree on {data.bpe.PROOF_TEXTS[0][:40]!r})"
    assert same_as_megatron(tmp_path / "l", "llama")


def test_an_unwritable_proof_cache_is_one_line_naming_xdg_cache_home(tokenizers, tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    out = subprocess.run(encode_command(tokenizers["qwen"], tmp_path / "q"), cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, "XDG_CACHE_HOME": str(blocker)})
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith(f"data.encode: error: cannot write the tokenizer proof "
                                                          f"cache {blocker}/tprimat/tokenizer-proofs (")
    assert out.stderr.strip().endswith("set XDG_CACHE_HOME to a writable directory")


def test_a_bad_line_is_reported_with_its_number(tokenizers, cache, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": "fine"}\n{"txt": "wrong key"}\n')
    out = subprocess.run([sys.executable, "-m", "data.encode", "--input", str(bad), "--tokenizer-model",
                          str(tokenizers["qwen"]), "--output-prefix", str(tmp_path / "b"), "--workers", "1",
                          "--append-eod", "--quiet"], cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, "XDG_CACHE_HOME": str(cache)})
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == \
        f"data.encode: error: --input {bad}: line 3 is not a JSON object with text (no field 'text')"
    assert not list(tmp_path.glob("b_*"))


def big_corpus(tmp_path: Path) -> Path:
    """~9 MB of JSON lines: long enough for an encode to be stopped in the middle."""
    texts = [json.loads(line)["text"] for line in gzip.open(SAMPLE, "rt", encoding="utf-8")]
    big = tmp_path / "big.jsonl"
    with open(big, "w", encoding="utf-8") as handle:
        for i in range(8):
            for text in texts:
                handle.write(json.dumps({"text": f"{i} {text}"}) + "\n")
    return big


def verified_pair(prefix: Path) -> tuple[Path, Path, Path]:
    """An earlier pair at the encode's output names, with the manifest data.verify gave it."""
    paths = tuple(Path(f"{prefix}_text_document{suffix}") for suffix in (".bin", ".idx", ".manifest.json"))
    for path in paths[:2]:
        path.write_bytes(b"old")
    paths[2].write_text('{"verified": true}')
    return paths


def start_encode(tokenizers, cache, big: Path, prefix: Path) -> subprocess.Popen:
    """An encode in its own process group, returned once it writes its partial .bin."""
    command = [sys.executable, "-m", "data.encode", "--input", str(big), "--tokenizer-model", str(tokenizers["qwen"]),
               "--output-prefix", str(prefix), "--workers", "2", "--append-eod", "--quiet"]
    proc = subprocess.Popen(command, cwd=REPO, start_new_session=True, env={**os.environ, "XDG_CACHE_HOME": str(cache)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    partial_bin = partial(Path(f"{prefix}_text_document.bin"))
    deadline = time.monotonic() + 120
    while not (partial_bin.exists() and partial_bin.stat().st_size > 0):
        assert proc.poll() is None and time.monotonic() < deadline, "encode ended before it could be stopped"
        time.sleep(0.01)
    return proc


def test_a_killed_encode_keeps_the_old_pair_unvouched_for_and_a_rerun_starts_clean(tokenizers, cache, tmp_path):
    prefix = tmp_path / "k"
    bin_path, idx_path, manifest = verified_pair(prefix)
    proc = start_encode(tokenizers, cache, big_corpus(tmp_path), prefix)
    assert not manifest.exists()  # removed first: no `verified: true` beside data data.verify has not seen
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert bin_path.read_bytes() == b"old" and idx_path.read_bytes() == b"old"  # replaced only by a complete pair
    rerun = encode_command(tokenizers["qwen"], prefix)
    assert subprocess.run(rerun, cwd=REPO, env={**os.environ, "XDG_CACHE_HOME": str(cache)}).returncode == 0
    assert bin_path.read_bytes() != b"old" and idx_path.read_bytes() != b"old"
    assert not partial(bin_path).exists() and not partial(idx_path).exists()


@pytest.mark.parametrize("signum, code, word", [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")])
def test_sigterm_and_ctrl_c_clean_up_and_say_so_in_one_line(tokenizers, cache, tmp_path, signum, code, word):
    """SIGTERM to the encode, or Ctrl-C (SIGINT to its whole process group, workers included)."""
    prefix = tmp_path / "s"
    bin_path, idx_path, _ = verified_pair(prefix)
    proc = start_encode(tokenizers, cache, big_corpus(tmp_path), prefix)
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code
    assert err.splitlines() == [f"data.encode: {word}"]
    assert not partial(bin_path).exists() and not partial(idx_path).exists()
    assert bin_path.read_bytes() == b"old" and idx_path.read_bytes() == b"old"


