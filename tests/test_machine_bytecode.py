"""utils.machine.bytecode: the bytecode of what the runs import, written once into .venv, whatever PYTHONDONTWRITEBYTECODE says."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path

from utils.machine import bytecode

REPO = Path(__file__).resolve().parent.parent


def pinned_distributions() -> set[str]:
    lines = (REPO / "requirements" / "host.txt").read_text().splitlines()
    return {re.split(r"[=\[ ]", line)[0].lower().replace("_", "-") for line in lines if line and line[0].isalpha()}


def test_every_module_it_imports_comes_from_a_pin_of_host_txt():
    """A module of a package .venv does not install would fail the import at every setup."""
    providers = importlib.metadata.packages_distributions()
    pins = pinned_distributions()
    unpinned = {name: providers.get(name.split(".")[0]) for group in bytecode.MODULES.values() for name in group
                if not {d.lower().replace("_", "-") for d in providers.get(name.split(".")[0], [])} & pins}
    assert unpinned == {}


def test_a_module_that_does_not_import_is_one_line_naming_it(monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    problems = bytecode.import_all(("json", "tprimat_no_such_module"))
    assert problems == ["tprimat_no_such_module: ModuleNotFoundError: No module named 'tprimat_no_such_module'"]
    assert sys.dont_write_bytecode is False  # within the tool's own process only: PYTHONDONTWRITEBYTECODE stays set


def test_only_the_first_group_imports_torch_so_the_second_is_written_beside_it():
    out = subprocess.run([sys.executable, "-c", "import json, sys; from utils.machine import bytecode; "
                          "bytecode.import_all(bytecode.MODULES['rest']); print(json.dumps('torch' in sys.modules))"],
                         cwd=REPO, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) is False
    assert "torch" in bytecode.MODULES["torch"]


class Beside:
    """subprocess.Popen's stand-in: the command the tool starts beside itself, and its exit status."""
    started: list[list[str]] = []

    def __init__(self, argv, **kwargs):
        Beside.started.append(argv[1:])

    def wait(self):
        return Beside.code


def test_it_compiles_the_checkout_s_packages_beside_the_other_group_and_exits_1_on_a_failure(monkeypatch, capsys):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setattr(bytecode.subprocess, "Popen", Beside)
    monkeypatch.setattr(bytecode, "MODULES", {"torch": ("json",), "rest": ("tprimat_no_such_module",)})
    Beside.started, Beside.code = [], 0
    assert bytecode.main([]) == 0
    assert Beside.started == [["-m", "utils.machine.bytecode", "--group", "rest"]]
    assert list((REPO / "utils" / "machine" / "__pycache__").glob("bytecode.*.pyc"))
    Beside.code = 1  # the other group's process said which module did not import
    assert bytecode.main([]) == 1
    assert bytecode.main(["--group", "rest"]) == 1
    assert capsys.readouterr().err == ("[tprimat] error: bytecode: tprimat_no_such_module: ModuleNotFoundError: No "
                                       "module named 'tprimat_no_such_module'\n")
