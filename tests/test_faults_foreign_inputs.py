"""Inputs that are not what they claim to be: a binary file given as a log, a settings file that is a link to
/dev/zero or far too large, a STRATEGIES_FILE of 50 MB or a device. Each is one line, exit 2, read in bounded time
and memory; a message quotes what it read with non-printable characters escaped and long lines cut."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evaluate import extract
from utils.cli import QUOTE_CHARS, quoted
from utils.envfile import MAX_BYTES, parse_env_file
from utils.spec.strategies import MAX_FILE_BYTES, StrategyError, load_table

ROOT = Path(__file__).resolve().parent.parent


def test_a_quote_escapes_control_characters_and_bytes_that_were_not_text():
    assert quoted("ok \x1b[31mred\x07\r\n\x00 \ufffd é") == "ok \\x1b[31mred\\x07\\r\\n\\x00 \\ufffd é"


def test_a_quote_cuts_a_long_line_and_says_how_much_more_there_was():
    assert quoted("x" * (QUOTE_CHARS + 1234)) == "x" * QUOTE_CHARS + " [... 1,234 more characters]"


def test_extract_refuses_a_binary_file_in_one_line_without_its_bytes(tmp_path, capsys):
    binary = tmp_path / "model.pt"
    binary.write_bytes(b"PK\x03\x04\x00\x00\xff\xfe\x1b[2J" + os.urandom(5000))
    assert extract.main([str(binary), "-o", str(tmp_path / "result.json")]) == 2
    err = capsys.readouterr().err
    assert err == (f"evaluate.extract: {binary}: not a text log (a NUL byte in its first 4 KiB); give the run's "
                   "console log (train.log, or what the framework printed)\n")
    assert not (tmp_path / "result.json").exists()


def test_extract_quotes_a_log_s_last_line_escaped_and_cut(tmp_path, capsys):
    log = tmp_path / "train.log"
    log.write_bytes(b"starting\n" + b"\x07\xff\xfe" + b"y" * 1000 + b"\n")
    assert extract.main([str(log), "-o", str(tmp_path / "result.json")]) == 1
    err = capsys.readouterr().err
    assert "last: \\x07\\ufffd\\ufffd" + "y" * (QUOTE_CHARS - 3) + " [... 803 more characters]" in err
    assert "\x07" not in err and len(err.splitlines()) == 1


def test_a_settings_file_that_is_a_link_to_dev_zero_is_one_problem_not_an_endless_read(tmp_path):
    link = tmp_path / "config.env"
    link.symlink_to("/dev/zero")
    assert parse_env_file(link) == ({}, [f"{link}: a device or pipe (a link to one?), not a text file of KEY=VALUE "
                                         "lines"])


def test_a_settings_file_far_larger_than_any_is_one_problem(tmp_path):
    huge = tmp_path / "secrets.env"
    huge.write_bytes(b"A=1\n" * (MAX_BYTES // 4 + 1))
    assert parse_env_file(huge)[1] == [f"{huge}: larger than 1024 KiB, which no file of KEY=VALUE settings is; is "
                                       "it the right file?"]


def test_a_settings_line_quoted_in_a_problem_is_escaped(tmp_path):
    path = tmp_path / "config.env"
    path.write_bytes(b"\x1b[31mnot a setting\n")
    assert parse_env_file(path)[1] == ["config.env:1: expected KEY=VALUE, got '\\x1b[31mnot a setting'"]


def test_a_strategies_file_of_50_mb_is_refused_at_once(tmp_path):
    big = tmp_path / "strategies.json"
    with open(big, "wb") as out:
        out.write(b'{"s": {"cpu": {"llama": [1, 1, 1]}}' + b" " * (50 << 20) + b"}")
    with pytest.raises(StrategyError) as caught:
        load_table(big, ("cpu",), ("llama",))
    assert caught.value.problems == [f"STRATEGIES_FILE={big}: larger than {MAX_FILE_BYTES >> 20} MiB, which no "
                                     "table of layouts is; is it the right file?"]


def test_a_strategies_file_that_is_a_device_is_refused_not_read_forever():
    env = {**os.environ, "STRATEGIES_FILE": "/dev/zero", "PLATFORM": "cpu", "TPRIMAT_DETECTED_PLATFORM": "cpu",
           "TPRIMAT_DETECTED_GPUS": "0"}
    out = subprocess.run([sys.executable, "-m", "utils.config", "env"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.splitlines()[0] == ("config error: STRATEGIES_FILE=/dev/zero: not a regular file (a device or "
                                          "pipe?); point it at a JSON file or leave it empty")
