"""The house's shape: utils/ is the domain core, and data/, train/ and evaluate/ meet only through it; bench/ (the
self-benchmarks) sits above them all and nothing imports it.

A stage that needs another stage's work runs it as a command (the launcher runs `python3 -m evaluate.judge`),
never imports it, so each stage can be read, tested and replaced on its own. Files stay small enough to
read top to bottom.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STAGES = ("data", "train", "evaluate")
CORE = "utils"
BENCHMARKS = "bench"
LINE_LIMIT = 400  # "about 400 lines": one job per file


def imported_packages(path: Path) -> set[str]:
    """The top-level packages a module imports anywhere (at the top or inside a function)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", STAGES)
def test_a_stage_imports_no_other_stage(package):
    others = set(STAGES) - {package}
    crossings = {str(path.relative_to(ROOT)): sorted(imported_packages(path) & others) for path in modules(package)}
    assert {path: found for path, found in crossings.items() if found} == {}


def test_the_core_imports_no_stage():
    crossings = {str(path.relative_to(ROOT)): sorted(imported_packages(path) & set(STAGES))
                 for path in modules(CORE)}
    assert {path: found for path, found in crossings.items() if found} == {}


def test_nothing_imports_the_benchmarks():
    importers = [str(path.relative_to(ROOT)) for package in (*STAGES, CORE) for path in modules(package)
                 if BENCHMARKS in imported_packages(path)]
    assert importers == []


def test_no_source_file_is_over_the_line_limit():
    sources = [path for folder in (*STAGES, CORE, BENCHMARKS, "shell", "tests") for pattern in ("*.py", "*.sh")
               for path in (ROOT / folder).rglob(pattern) if ".venv" not in path.parts]
    long = {str(path.relative_to(ROOT)): n for path in sources if (n := len(path.read_text().splitlines())) > LINE_LIMIT}
    assert long == {}


@pytest.mark.parametrize("trainer", ["train/train_mega.py", "train/train_fsdp.py", "train/train_autotp.py"])
def test_a_trainer_run_as_a_script_keeps_train_off_the_import_path(trainer):
    """torchrun starts the trainers as scripts, which puts their folder first on sys.path: train/'s subpackages (nemo/)
    would then shadow the frameworks' own packages of the same name."""
    probe = ("import runpy, sys; from pathlib import Path; sys.path.insert(0, 'train'); "
             "runpy.run_path(sys.argv[1], run_name='probe'); "
             "print([p for p in sys.path if Path(p or '.').resolve() == Path('train').resolve()])")
    out = subprocess.run([sys.executable, "-c", probe, trainer], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
