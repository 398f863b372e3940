"""evaluate.wrap: output.zip holds results, logs, system.json, plots and reports, and never a secret."""

import zipfile

import pytest

from evaluate import wrap


@pytest.fixture
def output_dir(tmp_path):
    root = tmp_path / "output"
    run = root / "20250501-120000-nvd" / "mega-llama"
    run.mkdir(parents=True)
    (run.parent / "system.json").write_text("{}")
    (run / "result.json").write_text("{}")
    (run / "train.log").write_text("iteration 1/10 |\n")
    (run.parent / "compare.png").write_bytes(b"\x89PNG")
    (run.parent / "report.md").write_text("# report\n")
    (root / "secrets.env").write_text("HF_TOKEN=hf_notarealtokenvalue123\n")
    (run / "__pycache__").mkdir()
    (run / "__pycache__" / "x.pyc").write_bytes(b"")
    (root / ".venv").mkdir()
    (root / ".venv" / "pyvenv.cfg").write_text("home = /usr\n")
    (root / "cache").mkdir()
    (root / "cache" / "index.npy").write_bytes(b"\x00")
    return root


def names(archive):
    with zipfile.ZipFile(archive) as zf:
        return sorted(zf.namelist())


def test_zip_holds_results_logs_system_plots_and_report(output_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    archive = tmp_path / "output.zip"
    assert wrap.main([str(output_dir), "--output", str(archive)]) == 0
    assert names(archive) == ["output/20250501-120000-nvd/compare.png", "output/20250501-120000-nvd/mega-llama/result.json",
                              "output/20250501-120000-nvd/mega-llama/train.log", "output/20250501-120000-nvd/report.md",
                              "output/20250501-120000-nvd/system.json"]


def test_secrets_caches_and_environments_are_left_out_and_said_so(output_dir):
    files, left_out = wrap.files_to_pack(output_dir)
    assert not any(p.name in ("secrets.env", "x.pyc", "pyvenv.cfg", "index.npy") for p in files)
    assert {line.split(" (")[0] for line in left_out} == {".venv/", "cache/", "secrets.env",
                                                          "20250501-120000-nvd/mega-llama/__pycache__/"}


def test_a_file_holding_the_token_value_stops_the_wrap_without_printing_it(output_dir, tmp_path, capsys, monkeypatch):
    token = "hf_abcdefghijklmnopqrstuvwxyz012345"
    monkeypatch.setenv("HF_TOKEN", token)
    (output_dir / "20250501-120000-nvd" / "mega-llama" / "train.log").write_text(f"token={token}\n")
    archive = tmp_path / "output.zip"
    assert wrap.main([str(output_dir), "--output", str(archive)]) == 1
    captured = capsys.readouterr()
    assert "train.log contains the value of a secret" in captured.err
    assert token not in captured.out + captured.err
    assert not archive.exists()


def test_a_zip_inside_the_output_dir_does_not_pack_itself(output_dir, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    archive = output_dir / "output.zip"
    assert wrap.main([str(output_dir), "--output", str(archive)]) == 0
    assert "output/output.zip" not in names(archive)


def test_a_missing_output_dir_is_bad_input(tmp_path, capsys):
    assert wrap.main([str(tmp_path / "nope")]) == 2
    assert "is not a directory" in capsys.readouterr().err
