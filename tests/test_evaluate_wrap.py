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
    (root / "history.sqlite").write_bytes(b"SQLite format 3\x00")  # the results store and its write-ahead log
    (root / "history.sqlite-wal").write_bytes(b"")
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
    assert {line.split(" (")[0] for line in left_out} == {".venv/", "cache/", "secrets.env", "history.sqlite",
                                                          "history.sqlite-wal",
                                                          "20250501-120000-nvd/mega-llama/__pycache__/"}
    assert any(line.startswith("history.sqlite (results store") for line in left_out)


def test_a_file_holding_the_token_value_stops_the_wrap_without_printing_it(output_dir, tmp_path, capsys, monkeypatch):
    token = "hf_abcdefghijklmnopqrstuvwxyz012345"
    monkeypatch.setenv("HF_TOKEN", token)
    (output_dir / "20250501-120000-nvd" / "mega-llama" / "train.log").write_text(f"token={token}\n")
    archive = tmp_path / "output.zip"
    assert wrap.main([str(output_dir), "--output", str(archive)]) == 1
    captured = capsys.readouterr()
    assert "train.log contains the value of HF_TOKEN (environment)" in captured.err
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


# --- every secret, wherever it hides -----------------------------------------------------------------

import bz2  # noqa: E402
import gzip  # noqa: E402
import io  # noqa: E402
import lzma  # noqa: E402
import tarfile  # noqa: E402

from utils import secrets as secrets_module  # noqa: E402

TOKEN = "hf_TESTSECRET123abcdefghij"  # what secrets.env holds
OTHER = "hf_OTHERtoken456abcdefghij"  # what the environment holds


@pytest.fixture
def secrets_env(tmp_path, monkeypatch):
    """A secrets.env holding TOKEN, and an environment without HF_TOKEN; returns the file to rewrite."""
    path = tmp_path / "secrets.env"
    path.write_text(f"HF_TOKEN={TOKEN}\n")
    monkeypatch.setattr(secrets_module, "SECRETS_FILE", path)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return path


def run_dir(output_dir):
    return output_dir / "20250501-120000-nvd" / "mega-llama"


def wrap_refuses(output_dir, tmp_path, capsys, *, said: str, code: int = 1) -> str:
    """Run the wrap; it must fail with `code`, write no zip, print `said` and no secret value."""
    archive = tmp_path / "output.zip"
    assert wrap.main([str(output_dir), "--output", str(archive)]) == code
    captured = capsys.readouterr()
    printed = captured.out + captured.err
    assert said in printed
    assert TOKEN not in printed and OTHER not in printed and "Traceback" not in printed
    assert not archive.exists()
    return printed


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def tar_gz_bytes(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


LOG = f"iteration 1 | token {TOKEN}\n".encode() * 50


def test_a_value_hidden_by_the_environments_is_still_searched_for(output_dir, secrets_env, tmp_path, capsys,
                                                                   monkeypatch):
    monkeypatch.setenv("HF_TOKEN", OTHER)
    (run_dir(output_dir) / "train.log").write_bytes(LOG)
    printed = wrap_refuses(output_dir, tmp_path, capsys, said="train.log contains the value of HF_TOKEN (secrets.env)")
    assert "environment" not in printed


def test_the_environments_value_is_searched_for_beside_the_files(output_dir, secrets_env, tmp_path, capsys,
                                                                  monkeypatch):
    monkeypatch.setenv("HF_TOKEN", OTHER)
    (run_dir(output_dir) / "result.json").write_text(f'{{"note": "{OTHER}"}}')
    wrap_refuses(output_dir, tmp_path, capsys, said="result.json contains the value of HF_TOKEN (environment)")


def test_every_key_of_secrets_env_is_a_secret(output_dir, secrets_env, tmp_path, capsys):
    secrets_env.write_text(f"HF_TOKEN={TOKEN}\nWANDB_API_KEY=wandbSECRET0987654321\n")
    (run_dir(output_dir) / "train.log").write_text("wandb: key wandbSECRET0987654321\n")
    wrap_refuses(output_dir, tmp_path, capsys, said="train.log contains the value of WANDB_API_KEY (secrets.env)")


def test_a_value_written_as_json_escapes_it_is_found(output_dir, secrets_env, tmp_path, capsys):
    secrets_env.write_text('DB_PASSWORD=\'pa"ss\\word1234\'\n')
    (run_dir(output_dir) / "result.json").write_text('{"password": "pa\\"ss\\\\word1234"}')
    wrap_refuses(output_dir, tmp_path, capsys, said="result.json contains the value of DB_PASSWORD (secrets.env)")


@pytest.mark.parametrize("name, data", [
    ("train.log.gz", gzip.compress(LOG)),
    ("train.log.bz2", bz2.compress(LOG)),
    ("train.log.xz", lzma.compress(LOG)),
    ("logs.zip", zip_bytes({"train.log": LOG})),
    ("logs.tar.gz", tar_gz_bytes({"node1/train.log": LOG})),
    ("old-output.zip", zip_bytes({"inner.zip": zip_bytes({"train.log": LOG})})),
    ("logs.tar.gz.zip", zip_bytes({"logs.tar.gz": tar_gz_bytes({"train.log.gz": gzip.compress(LOG)})})),
    ("renamed.txt", gzip.compress(LOG)),  # the format is read from the bytes, not the name
], ids=["gzip", "bzip2", "xz", "zip", "tar.gz", "zip-in-zip", "gzip-in-tar.gz-in-zip", "gzip-named-txt"])
def test_a_secret_inside_a_compressed_file_or_archive_is_found(output_dir, secrets_env, tmp_path, capsys, name, data):
    (run_dir(output_dir) / name).write_bytes(data)
    wrap_refuses(output_dir, tmp_path, capsys, said=f"{name} contains the value of HF_TOKEN (secrets.env)")


def test_a_secret_in_an_archive_members_name_is_found(output_dir, secrets_env, tmp_path, capsys):
    (run_dir(output_dir) / "logs.tar.gz").write_bytes(tar_gz_bytes({f"{TOKEN}.log": b"x"}))
    wrap_refuses(output_dir, tmp_path, capsys, said="logs.tar.gz contains the value of HF_TOKEN (secrets.env)")


def test_a_secret_in_a_file_name_is_refused_and_masked(output_dir, secrets_env, tmp_path, capsys):
    (run_dir(output_dir) / f"notes-{TOKEN}.txt").write_text("x")
    wrap_refuses(output_dir, tmp_path, capsys, said="notes-[HF_TOKEN (secrets.env)].txt contains the value of HF_TOKEN")


def test_clean_compressed_files_and_archives_are_packed(output_dir, secrets_env, tmp_path):
    clean = b"iteration 1 | loss 2.0\n" * 50
    (run_dir(output_dir) / "train.log.gz").write_bytes(gzip.compress(clean))
    (run_dir(output_dir) / "logs.tar.gz").write_bytes(tar_gz_bytes({"train.log": clean}))
    archive = tmp_path / "output.zip"
    assert wrap.main([str(output_dir), "--output", str(archive)]) == 0
    assert "output/20250501-120000-nvd/mega-llama/logs.tar.gz" in names(archive)


@pytest.mark.parametrize("name, data, said", [
    ("train.log.zst", b"\x28\xb5\x2f\xfd" + bytes(32), "is zstd-compressed"),
    ("train.log.gz", gzip.compress(LOG)[:40], "cannot be read to the end"),  # cut short by a killed run
    ("logs.zip", zip_bytes({"train.log.zst": b"\x28\xb5\x2f\xfd" + bytes(32)}), "is zstd-compressed"),
], ids=["zstd", "truncated-gzip", "zstd-in-zip"])
def test_what_cannot_be_searched_is_not_packed(output_dir, secrets_env, tmp_path, capsys, name, data, said):
    (run_dir(output_dir) / name).write_bytes(data)
    printed = wrap_refuses(output_dir, tmp_path, capsys, said=said)
    assert name in printed and "remove it" in printed


def test_an_unreadable_secrets_env_line_stops_the_wrap_naming_the_line_not_its_text(output_dir, secrets_env, tmp_path,
                                                                                     capsys):
    secrets_env.write_text(f"# mine\nHF_TOKEN {TOKEN}\n")
    wrap_refuses(output_dir, tmp_path, capsys, said="secrets.env:2: expected KEY=VALUE (the line is not shown", code=2)


def test_a_value_too_short_to_search_for_is_named_not_silently_skipped(output_dir, secrets_env, tmp_path, capsys):
    secrets_env.write_text("PIN=1234\n")
    assert wrap.main([str(output_dir), "--output", str(tmp_path / "output.zip")]) == 0
    assert "PIN (secrets.env) is shorter than 8 characters: not searched for" in capsys.readouterr().err
