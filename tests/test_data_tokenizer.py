"""data.tokenizer / data.fetch tokenizer: Hub first, the offline copy only when the Hub is unreachable,
one clear line per Hub failure, and an identity (source + sha256) recorded beside the files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from utils.cli import WorkError
from data.tokenizer import prepare_tokenizer, read_identity
from utils.datafiles import IDENTITY_FILE

REPO = Path(__file__).resolve().parent.parent
FIXTURE_TOKENIZER_SHA256 = {  # the tokenizers the Megatron fixtures were made with (tests/fixtures/data/README.md)
    "llama": "3e38cf9f1cf889e3aa4589588d0cca0bdf85c310d9fa395d1f495690e6d14770",
    "qwen": "9e9aa587b9485798430168c30e0e9a6ab0e7835687bd2b9cbcdfe47432f21b5a",
}


def offline_tokenizer(model: str, base: Path) -> Path:
    """The offline tokenizer of a model, built once per test session under `base` (shared by the data tests)."""
    directory = base / "tokenizers" / model
    if not (directory / IDENTITY_FILE).exists():
        os.environ["HF_HUB_OFFLINE"] = "1"
        prepare_tokenizer(model, directory, token=None, allow_fallback=True, cache_dir=str(base / "hf-cache"))
    return directory


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.getbasetemp()
    return {m: offline_tokenizer(m, base) for m in ("llama", "qwen")}


def test_offline_llama_is_llama3_shaped(tokenizers):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(tokenizers["llama"]))
    assert len(tok) == 128256
    assert tok.convert_ids_to_tokens([128000, 128001, 128009, 128255]) == [
        "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|reserved_special_token_247|>"]
    assert tok.eos_token_id == 128001
    assert tok("Hello, world!").input_ids == [128000, 9906, 11, 1917, 0]  # BOS added as Meta's tokenizer does


def test_offline_qwen_is_qwen25_shaped(tokenizers):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(tokenizers["qwen"]))
    assert len(tok) == 151665  # Qwen 3's 151665-151668 dropped
    assert tok.eos_token_id == 151643 and tok.bos_token is None
    assert tok("Hello, world!").input_ids == [9707, 11, 1879, 0]
    assert tok("<think>").input_ids != [151667]


def test_identity_records_fallback_source_and_the_hash_the_fixtures_were_made_with(tokenizers):
    for model, directory in tokenizers.items():
        identity = read_identity(directory)
        assert identity.fallback and identity.source.startswith("fallback:")
        assert identity.sha256 == FIXTURE_TOKENIZER_SHA256[model]


def test_a_changed_tokenizer_file_is_detected(tokenizers, tmp_path):
    copy = tmp_path / "qwen"
    copy.mkdir()
    for path in tokenizers["qwen"].iterdir():
        copy.joinpath(path.name).write_bytes(path.read_bytes())
    config = json.loads((copy / "tokenizer_config.json").read_text())
    config["eos_token"] = "<|im_end|>"
    (copy / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(WorkError, match="changed since"):
        read_identity(copy)


def _raise(error: BaseException):
    def fake(*args, **kwargs):
        raise error
    return fake


def hub_error(kind: str) -> Exception:
    """The exception huggingface_hub raises for a gated repository, a missing one, or no Hub and no cache."""
    from types import SimpleNamespace

    from huggingface_hub import errors
    if kind == "offline":
        return errors.LocalEntryNotFoundError("simulated: no connection and nothing cached")
    cls = {"gated": errors.GatedRepoError, "missing": errors.RepositoryNotFoundError}[kind]
    return cls("simulated", response=SimpleNamespace(headers={}, request=None, status_code=401))


@pytest.mark.parametrize("token", [None, "hf_secretTOKEN123"])
def test_gated_repository_names_the_licence_page_and_secrets_env_without_the_token(monkeypatch, tmp_path, token):
    monkeypatch.setattr("huggingface_hub.snapshot_download", _raise(hub_error("gated")))
    with pytest.raises(WorkError) as err:
        prepare_tokenizer("llama", tmp_path / "llama", token=token, allow_fallback=True)
    message = str(err.value)
    assert "https://huggingface.co/meta-llama/Llama-3.1-8B" in message and "secrets.env" in message
    assert ("refused" if token else "no HF_TOKEN") in message
    assert "hf_secret" not in message and "\n" not in message
    assert not (tmp_path / "llama").exists()


def test_mistral_is_gated_and_has_no_offline_copy(monkeypatch, tmp_path):
    """No PyPI package ships Mistral 7B v0.1's tokenizer: offline, the Hub's cache is the only source."""
    monkeypatch.setattr("huggingface_hub.snapshot_download", _raise(hub_error("gated")))
    with pytest.raises(WorkError, match="https://huggingface.co/mistralai/Mistral-7B-v0.1"):
        prepare_tokenizer("mistral", tmp_path / "mistral", token=None, allow_fallback=True)
    monkeypatch.setattr("huggingface_hub.snapshot_download", _raise(hub_error("offline")))
    with pytest.raises(WorkError, match="no PyPI package ships the Mistral 7B v0.1 tokenizer, so there is no offline"):
        prepare_tokenizer("mistral", tmp_path / "mistral", token=None, allow_fallback=True)
    assert not (tmp_path / "mistral").exists()


def test_llama70b_gets_llamas_tokenizer_recorded_as_llamas(monkeypatch, tmp_path, tokenizers):
    snapshot = tmp_path / "cache" / "4567cdef"
    snapshot.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        snapshot.joinpath(name).write_bytes((tokenizers["llama"] / name).read_bytes())
    seen = {}

    def fake(repo, **kwargs):
        seen["repo"] = repo
        return str(snapshot)
    monkeypatch.setattr("huggingface_hub.snapshot_download", fake)
    identity = prepare_tokenizer("llama70b", tmp_path / "llama", token="tok", allow_fallback=False)
    assert seen["repo"] == "meta-llama/Llama-3.1-8B"
    assert (identity.model, identity.source) == ("llama", "hub:meta-llama/Llama-3.1-8B@4567cdef")


def test_missing_repository_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr("huggingface_hub.snapshot_download", _raise(hub_error("missing")))
    with pytest.raises(WorkError, match="^Qwen/Qwen2.5-7B was not found on the Hub"):
        prepare_tokenizer("qwen", tmp_path / "qwen", token=None, allow_fallback=True)


def test_unreachable_hub_falls_back_only_when_allowed(monkeypatch, tmp_path):
    monkeypatch.setattr("huggingface_hub.snapshot_download", _raise(hub_error("offline")))
    with pytest.raises(WorkError, match="ALLOW_FALLBACK_TOKENIZER=1"):
        prepare_tokenizer("qwen", tmp_path / "qwen", token=None, allow_fallback=False)
    assert prepare_tokenizer("qwen", tmp_path / "qwen", token=None, allow_fallback=True).fallback


def test_hub_files_are_copied_with_their_commit(monkeypatch, tmp_path, tokenizers):
    snapshot = tmp_path / "cache" / "0123abcd"
    snapshot.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        snapshot.joinpath(name).write_bytes((tokenizers["qwen"] / name).read_bytes())
    seen = {}

    def fake(repo, **kwargs):
        seen.update(kwargs, repo=repo)
        return str(snapshot)
    monkeypatch.setattr("huggingface_hub.snapshot_download", fake)
    identity = prepare_tokenizer("qwen", tmp_path / "qwen", token="tok", allow_fallback=False)
    assert identity.source == "hub:Qwen/Qwen2.5-7B@0123abcd" and not identity.fallback
    assert seen["repo"] == "Qwen/Qwen2.5-7B" and seen["token"] == "tok"
    assert set(seen["allow_patterns"]) >= {"tokenizer.json", "tokenizer_config.json"}
    assert sorted(p.name for p in (tmp_path / "qwen").iterdir()) == [
        "tokenizer.json", "tokenizer_config.json", IDENTITY_FILE]


def test_cli_refuses_the_offline_copy_on_a_gpu_platform(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-m", "data.fetch", "tokenizer", "--model", "qwen", "--platform", "nvd",
                          "--output-dir", str(tmp_path / "qwen")], cwd=REPO, env=env, capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1].startswith("data.fetch: error: the Hub is unreachable")
    assert "Traceback" not in out.stderr and not (tmp_path / "qwen").exists()


def fetch_tokenizer(tmp_path: Path, *args: str, **config: str) -> subprocess.CompletedProcess:
    """`python3 -m data.fetch tokenizer ARGS` offline, with configuration variables set in the environment."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "DATA_DIR": str(tmp_path / "data"),
           "PLATFORM": "cpu", **config}
    return subprocess.run([sys.executable, "-m", "data.fetch", "tokenizer", *args], cwd=REPO, env=env,
                          capture_output=True, text=True)


def test_the_readme_command_prepares_every_model_of_the_configuration_into_data_dir(tmp_path):
    out = fetch_tokenizer(tmp_path, MODELS="llama,qwen")
    assert out.returncode == 0, out.stderr[-2000:]
    for model in ("llama", "qwen"):
        directory = tmp_path / "data" / "tokenizers" / model
        assert read_identity(directory).sha256 == FIXTURE_TOKENIZER_SHA256[model]
        assert f"data.fetch: tokenizer {model} = fallback:" in out.stderr and str(directory) in out.stderr


def test_llama70b_and_llama_share_one_tokenizer_prepared_once(tmp_path):
    out = fetch_tokenizer(tmp_path, MODELS="llama70b,llama")
    assert out.returncode == 0, out.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "data" / "tokenizers").iterdir()) == ["llama"]
    assert out.stderr.count("data.fetch: tokenizer ") == 1 and "data.fetch: tokenizer llama = fallback:" in out.stderr
    assert read_identity(tmp_path / "data" / "tokenizers" / "llama").sha256 == FIXTURE_TOKENIZER_SHA256["llama"]


def test_one_model_goes_to_its_data_dir_directory_whatever_models_says(tmp_path):
    assert fetch_tokenizer(tmp_path, "--model", "qwen", MODELS="llama").returncode == 0
    assert sorted(p.name for p in (tmp_path / "data" / "tokenizers").iterdir()) == ["qwen"]


def test_an_output_dir_without_a_model_is_refused_in_one_line(tmp_path):
    out = fetch_tokenizer(tmp_path, "--output-dir", str(tmp_path / "tok"))
    assert out.returncode == 2
    assert out.stderr == ("data.fetch: error: --output-dir is one model's directory: give --model too, or neither to "
                          "prepare every model of MODELS into DATA_DIR/tokenizers/<model>; "
                          "see python3 -m data.fetch tokenizer --help\n")


def test_a_bad_configuration_is_reported_as_every_tool_reports_it(tmp_path):
    out = fetch_tokenizer(tmp_path, MODELS="llama,gpt")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.startswith("data.fetch: config error: MODELS=")
    assert not (tmp_path / "data").exists()
