"""Every data tool answers --help with its usage and exit 0, and refuses an unknown argument with one line naming it
and where the usage is, exit 2, before doing any work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Each command with arguments it would accept, so that the only thing wrong is the unknown option added to them.
COMMANDS = {
    "data.fetch dataset": ["--dataset", "sample", "--samples", "1", "--seed", "1", "--output", "raw.jsonl"],
    "data.fetch tokenizer": ["--model", "qwen", "--output-dir", "tok", "--platform", "cpu"],
    "data.clean": ["--input", "raw.jsonl", "--output", "clean.jsonl"],
    "data.encode": ["--input", "clean.jsonl", "--tokenizer-model", "tok", "--output-prefix", "p", "--workers", "1"],
    "data.verify": ["--prefix", "p", "--tokenizer", "tok"],
    "data.stage": ["--name", "demo", "--stamps", "stamps", "--", "json.tool"],
    "bench.encode": ["--tokenizer", "tok"],
}


def tool(command: str, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *command.split(), *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.parametrize("command", ["data.fetch", *COMMANDS])
def test_help_prints_the_usage_and_exits_0(command):
    out = tool(command, "--help")
    assert out.returncode == 0 and out.stderr == ""
    assert out.stdout.startswith(f"usage: python3 -m {command} ")


def test_the_stage_help_shows_the_module_it_runs_after_the_separator():
    assert "-- MODULE ARG..." in tool("data.stage", "--help").stdout.splitlines()[0]


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unknown_argument_is_one_line_and_exit_2(command, tmp_path):
    args = COMMANDS[command]
    split = args.index("--") if "--" in args else len(args)  # data.stage: the unknown option goes before --
    out = tool(command, *args[:split], "--no-such-option", *args[split:], cwd=tmp_path)
    tool_name = command.split()[0]
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == (f"{tool_name}: error: unrecognized arguments: --no-such-option; "
                          f"see python3 -m {command} --help\n")
    assert not list(tmp_path.iterdir())  # refused before any work
