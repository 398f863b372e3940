"""shell/purge.sh: outputs and caches go, prepared data only with --with-data, everything named first."""

from __future__ import annotations

from tests.shell_harness import FakeMachine


def prepared_machine(tmp_path):
    node = FakeMachine(tmp_path)
    (tmp_path / "output" / "20260101-000000-cpu").mkdir(parents=True)
    (tmp_path / "data" / "tokenizers").mkdir(parents=True)
    (node.root / "output.zip").write_bytes(b"zip")
    return node


def test_purge_removes_outputs_and_keeps_data(tmp_path):
    node = prepared_machine(tmp_path)
    result = node.run("shell/purge.sh")
    assert result.returncode == 0, result.output
    assert not (tmp_path / "output" / "20260101-000000-cpu").exists()
    assert not (node.root / "output.zip").exists()
    assert (tmp_path / "data" / "tokenizers").exists()
    assert "20260101-000000-cpu" in result.stderr and "--with-data" in result.stderr


def test_purge_with_data_names_and_removes_the_data_dir(tmp_path):
    node = prepared_machine(tmp_path)
    result = node.run("shell/purge.sh", "--with-data")
    assert result.returncode == 0, result.output
    assert str(tmp_path / "data") in result.stderr
    assert not (tmp_path / "data").exists()


def test_purge_rejects_unknown_options(tmp_path):
    result = FakeMachine(tmp_path).run("shell/purge.sh", "--everything")
    assert result.returncode == 2 and "unknown argument '--everything'" in result.stderr
