"""utils.machine.bytecode: the bytecode of what the runs import, written once into .venv, whatever PYTHONDONTWRITEBYTECODE says."""

from __future__ import annotations

import importlib.metadata
import re
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
    unpinned = {name: providers.get(name.split(".")[0]) for name in bytecode.MODULES
                if not {d.lower().replace("_", "-") for d in providers.get(name.split(".")[0], [])} & pins}
    assert unpinned == {}


def test_a_module_that_does_not_import_is_one_line_naming_it(monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    problems = bytecode.import_all(("json", "tprimat_no_such_module"))
    assert problems == ["tprimat_no_such_module: ModuleNotFoundError: No module named 'tprimat_no_such_module'"]
    assert sys.dont_write_bytecode is False  # within the tool's own process only: PYTHONDONTWRITEBYTECODE stays set


def test_it_compiles_the_checkout_s_packages_and_exits_1_on_a_failed_import(monkeypatch, capsys):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setattr(bytecode, "MODULES", ("json",))
    assert bytecode.main([]) == 0
    assert list((REPO / "utils" / "machine" / "__pycache__").glob("bytecode.*.pyc"))
    monkeypatch.setattr(bytecode, "MODULES", ("tprimat_no_such_module",))
    assert bytecode.main([]) == 1
    assert capsys.readouterr().err.startswith("[tprimat] error: bytecode: tprimat_no_such_module: ")
