"""A write the machine refuses (a full disk, the file-size limit, a read-only file system, a file where a folder
should be) is one line naming the path, what was written and the fix, exit 1, never a traceback, and nothing
half-written under the final name or the temporary one; a trainer whose step log or result cannot be written ends
failed. The file-size limit (RLIMIT_FSIZE, `ulimit -f`) is the real refusal here (EFBIG: tests run as root, whom
permissions do not stop); a full and a read-only disk are simulated by an open() that raises their errno, and a
folder under a file (ENOTDIR) is real."""

from __future__ import annotations

import builtins
import errno
import json
import os
import resource
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from data.verify import _cache_problem
from tests.test_train_mega_runs import BASE, ROOT, trainer_env, write_request
from train.common.step_log import StepLog, StepRecord
from utils.files import DiskError, atomic_open, disk_problem, write_json

SAMPLE = ROOT / "data" / "sample" / "sample.jsonl.gz"


def limited(kib: int, *command: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m COMMAND` with `ulimit -f KIB` (Python ignores SIGXFSZ, so a write past it fails with EFBIG)."""
    limit = kib * 1024
    return subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, env=env,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))


def one_disk_line(out: subprocess.CompletedProcess, tool: str, path: Path) -> str:
    """The tool's last stderr line, checked to be its one line about `path` (exit 1, no traceback)."""
    assert out.returncode == 1, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert line.startswith(f"{tool}: error: cannot write {path}: the file reached the file-size limit (")
    assert line.endswith("raise the limit (ulimit -f unlimited) or use a folder on a file system that allows larger "
                         "files")
    return line


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    """A small fetched corpus (the bundled sample)."""
    out = tmp_path_factory.mktemp("raw") / "raw.jsonl"
    done = subprocess.run([sys.executable, "-m", "data.fetch", "dataset", "--dataset", "sample", "--samples", "400",
                           "--seed", "1", "--output", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_fetch_past_the_file_size_limit_is_one_line_and_leaves_no_partial_file(tmp_path):
    out = limited(64, "data.fetch", "dataset", "--dataset", "sample", "--samples", "3000", "--seed", "1",
                  "--output", str(tmp_path / "raw.jsonl"))
    line = one_disk_line(out, "data.fetch", tmp_path / "raw.jsonl")
    assert "ulimit -f is 64 KiB" in line
    assert leftovers(tmp_path) == []


def test_clean_past_the_file_size_limit_is_one_line_and_leaves_no_partial_file(tmp_path, raw):
    out = limited(16, "data.clean", "--input", str(raw), "--output", str(tmp_path / "clean.jsonl"), "--quiet")
    one_disk_line(out, "data.clean", tmp_path / "clean.jsonl")
    assert leftovers(tmp_path) == []


def test_encode_past_the_file_size_limit_keeps_the_earlier_pair_and_leaves_no_partial_file(tmp_path, raw):
    tokenizer = tmp_path / "tok"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "data.fetch", "tokenizer", "--model", "qwen", "--output-dir",
                           str(tokenizer), "--platform", "cpu", "--allow-fallback"], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    clean = tmp_path / "clean.jsonl"
    assert subprocess.run([sys.executable, "-m", "data.clean", "--input", str(raw), "--output", str(clean),
                           "--quiet"], cwd=ROOT, capture_output=True).returncode == 0
    encode = ("data.encode", "--input", str(clean), "--tokenizer-model", str(tokenizer), "--output-prefix",
              str(tmp_path / "out" / "pre"), "--workers", "1", "--append-eod", "--quiet")
    assert limited(1 << 20, *encode, env=env).returncode == 0  # the earlier pair, and the tokenizer's proof cached
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    one_disk_line(limited(16, *encode, env=env), "data.encode", tmp_path / "out" / "pre_text_document.bin")
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before


def test_the_tokenizer_past_the_file_size_limit_is_one_line_naming_its_folder(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = limited(64, "data.fetch", "tokenizer", "--model", "qwen", "--output-dir", str(tmp_path / "tok"),
                  "--platform", "cpu", "--allow-fallback", env=env)
    one_disk_line(out, "data.fetch", tmp_path / "tok")
    assert leftovers(tmp_path) == []


def test_a_full_disk_names_the_path_the_space_left_and_the_knob_that_moves_it(tmp_path, monkeypatch):
    target = tmp_path / "out" / "report.md"
    target.parent.mkdir()
    target.write_text("the earlier report\n")
    monkeypatch.setenv("OUTPUT_DIR", str(tmp_path))

    real_open = builtins.open

    class Full:
        """A temporary file on a disk that fills up at the first write (after the file was created)."""

        def __init__(self, path, *args, **kwargs):
            self.file = real_open(path, *args, **kwargs)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(builtins, "open", lambda path, *a, **k: Full(path, *a, **k) if str(path).endswith(".tmp")
                        else real_open(path, *a, **k))
    with pytest.raises(DiskError) as caught, atomic_open(target) as out:
        out.write("x")
    line = str(caught.value)
    assert line.startswith(f"cannot write {target}: the disk is full (") and " free)" in line
    assert line.endswith("; free space there or set OUTPUT_DIR to a folder on a larger disk")
    monkeypatch.undo()
    assert leftovers(target.parent) == ["report.md"] and target.read_text() == "the earlier report\n"


def test_a_read_only_file_system_is_one_line_with_its_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    real_open = builtins.open

    def read_only(path, *args, **kwargs):
        if str(path).endswith(".tmp"):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", read_only)
    with pytest.raises(DiskError) as caught:
        write_json(tmp_path / "stamps" / "fetch.json", {"a": 1})
    assert str(caught.value) == (f"cannot write {tmp_path / 'stamps' / 'fetch.json'}: the file system is read-only; "
                                 "set DATA_DIR to a folder on a writable file system")


def test_an_output_folder_under_a_file_is_one_line_and_writes_nothing(tmp_path):
    (tmp_path / "plain-file").write_text("not a folder")
    target = tmp_path / "plain-file" / "run" / "result.json"
    with pytest.raises(DiskError) as caught:
        write_json(target, {"a": 1})
    assert str(caught.value) == f"cannot write {target}: a part of the path is a file, not a folder; remove that " \
                                "file or use a folder elsewhere"


def test_an_error_reading_another_file_is_not_called_a_refused_write(tmp_path):
    with pytest.raises(PermissionError), atomic_open(tmp_path / "out.txt") as out:
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "input.txt"))
    assert leftovers(tmp_path) == []
    assert disk_problem(OSError(errno.EIO, "I/O error")) is None


def test_the_step_log_refused_by_the_disk_raises_the_line_naming_it(tmp_path):
    log = StepLog(tmp_path / "steps.jsonl")

    record = StepRecord(1, 0.5, 11.7, 1e-3, 2.0, 0, 0, 256, None, None)
    log.write(record)
    whole = (tmp_path / "steps.jsonl").read_bytes()
    real = log._file

    class Full:
        """The step log's file on a disk that is full after half a record."""

        closed = False

        def tell(self):
            return real.tell()

        def write(self, text):
            real.write(text[:len(text) // 2])
            real.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

        def close(self):
            real.close()

    log._file = Full()
    with pytest.raises(DiskError, match=f"^cannot write {tmp_path / 'steps.jsonl'}: the disk is full"):
        log.write(replace(record, step=2))
    assert log.records == [record]
    assert (tmp_path / "steps.jsonl").read_bytes() == whole


def test_verify_s_index_cache_refused_is_named_with_tmpdir_not_as_a_broken_pair(tmp_path):
    short = OSError("4058 requested and 480 written")  # numpy's short write carries no errno
    assert _cache_problem(short, tmp_path) == (
        f"cannot write GPTDataset's index cache in {tmp_path}: 4058 requested and 480 written; free space in the "
        "temporary folder or set TMPDIR to a folder on a larger disk (or raise the file-size limit, ulimit -f)")
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x.npy"))
    assert _cache_problem(full, tmp_path).endswith("; free space there or set TMPDIR to a folder on a larger disk")


def test_a_trainer_whose_step_log_and_account_cannot_be_written_fails_in_one_line_each(tmp_path):
    knobs = {**BASE, "MOCK_DATA": 1, "TRAIN_ITERS": 6, "WARMUP_STEPS": 1}
    env = trainer_env(tmp_path / "no-data", knobs)
    request = write_request(tmp_path / "run" / "config.json", tmp_path / "no-data", **knobs)
    limit = 1500
    out = subprocess.run([sys.executable, "train/train_mega.py", "--request", str(request), "--run-dir",
                          str(tmp_path / "run")], cwd=ROOT, env=env, capture_output=True, text=True,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("train_mega: error: ")]
    assert [line.split(":")[2].strip() for line in errors] == [
        f"cannot write {tmp_path / 'run' / 'steps.jsonl'}", f"cannot write {tmp_path / 'run' / 'trainer.json'}"]
    assert not any(p.name.startswith("trainer.json") for p in (tmp_path / "run").iterdir())
    assert all(json.loads(line) for line in (tmp_path / "run" / "steps.jsonl").read_text().splitlines())
