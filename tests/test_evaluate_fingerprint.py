"""evaluate.fingerprint: what proves that two runs trained on the same data with the same code."""

import hashlib
import json
import os
import re
import subprocess

import pytest

from utils import fingerprint
from tests.fixtures.data.verified import write_manifest


@pytest.fixture
def dataset(tmp_path):
    prefix = tmp_path / "sample_llama_text_document"
    prefix.with_name(prefix.name + ".bin").write_bytes(b"\x01\x00\x00\x00" * 10)
    prefix.with_name(prefix.name + ".idx").write_bytes(b"MMIDIDX\x00\x00\x01" + bytes(7) + b"\x04" + bytes(16))
    return prefix


def file_fingerprint(prefix) -> str:
    shas = [hashlib.sha256(prefix.with_name(prefix.name + s).read_bytes()).hexdigest() for s in (".bin", ".idx")]
    return hashlib.sha256("\n".join(shas).encode()).hexdigest()


def test_a_verified_dataset_is_fingerprinted_by_its_files_and_says_verified(dataset, tmp_path):
    tokenizer = tmp_path / "tokenizers" / "llama"
    tokenizer.mkdir(parents=True)
    (tokenizer / "tokenizer.json").write_text("{}")
    manifest = write_manifest(dataset, tokenizer, "llama")
    assert fingerprint.dataset_fingerprint(dataset) == {
        "fingerprint": file_fingerprint(dataset), "tokenizer_fingerprint": manifest["tokenizer"]["sha256"],
        "source": "verified", "verified": True}


def test_a_manifest_does_not_lend_its_fingerprint_to_other_files(dataset):
    """The manifest's word is never the fingerprint: a result carries that of the files it read."""
    manifest = dataset.with_name(dataset.name + ".manifest.json")
    manifest.write_text(json.dumps({"fingerprint": "f" * 64, "tokenizer": {"sha256": "t" * 64}, "verified": True}))
    found = fingerprint.dataset_fingerprint(dataset)
    assert found["fingerprint"] == file_fingerprint(dataset) and found["tokenizer_fingerprint"] == "t" * 64
    assert found["source"] == "computed" and found["verified"] is False and "run_data.sh" in found["problem"]


def test_without_a_manifest_the_fingerprint_is_computed_from_both_files(dataset):
    found = fingerprint.dataset_fingerprint(dataset)
    assert found["fingerprint"] == file_fingerprint(dataset)
    assert found["source"] == "computed" and found["tokenizer_fingerprint"] is None


def test_missing_data_names_the_files_and_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"\.bin.*run_data\.sh"):
        fingerprint.dataset_fingerprint(tmp_path / "bc_qwen_text_document")


def test_config_fingerprint_covers_the_workload_not_the_layout():
    base = {"SL": 2048, "GBS": 128, "PRECISION": "bf16", "TP": 1, "DATA_DIR": "/a"}
    same = fingerprint.config_fingerprint({**base, "TP": 4, "DATA_DIR": "/b"})
    assert fingerprint.config_fingerprint(base) == same
    assert fingerprint.config_fingerprint({**base, "SL": 4096}) != same


def test_project_commit_is_the_checkout_head():
    commit = fingerprint.project_commit()
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", commit)


@pytest.mark.parametrize("owner", ["root reads a user's checkout", "git's own simulation of another owner"])
def test_project_commit_is_found_in_a_checkout_another_user_owns_as_in_a_container(tmp_path, monkeypatch, owner):
    repo = tmp_path / "mounted"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    if owner.startswith("root"):
        if os.geteuid() != 0:
            pytest.skip("only root can give the checkout to another user")
        subprocess.run(["chown", "-R", "nobody", str(repo)], check=True)
    else:
        monkeypatch.setenv("GIT_TEST_ASSUME_DIFFERENT_OWNER", "1")
    refused = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert "dubious ownership" in refused.stderr  # what a plain rev-parse meets
    assert fingerprint.project_commit(repo) == head


def test_cli_prints_the_fingerprints_of_given_prefixes(dataset, capsys):
    assert fingerprint.main(["--data-prefix", str(dataset)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["datasets"][str(dataset)]["source"] == "computed"
