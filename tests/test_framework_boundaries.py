"""A framework is its folders: its code imports no other framework's, and nothing outside them names it.

Each framework's modules (train/<name>/, train/train_<name>.py and its registry folder utils/frameworks/<name>/: its
entry and log format) may import what all share (train/common, train/launch, train/native for the torch-native
ones, utils/, evaluate/) but nothing of another framework. What two share moves to a shared module
(train/common/megatron_settings.py for NeMo and Megatron-Bridge, train/common/hf_config.py for the Hugging Face
config the torch-native frameworks and Megatron-Bridge build from, utils/frameworks/megatron_log.py for the log
format of every Megatron-LM loop)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from utils.frameworks import ENTRY_MODULES, TABLE

ROOT = Path(__file__).resolve().parent.parent


def own_files(name: str) -> list[Path]:
    """The framework's own Python files."""
    files = [path for folder in (ROOT / "train" / name, ROOT / "utils" / "frameworks" / name)
             for path in sorted(folder.rglob("*.py"))]
    return files + [path for path in (ROOT / "train" / f"train_{name}.py",) if path.is_file()]


def imported(path: Path) -> set[str]:
    """Every module a file imports, at its top or inside a function, and every module named to importlib."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module" and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            found.add(node.args[0].value)
    return found


def others_modules(name: str) -> tuple[str, ...]:
    """The module prefixes of every other framework."""
    return tuple(prefix for other in TABLE if other != name
                 for prefix in (f"train.{other}", f"train.train_{other}", f"utils.frameworks.{other}"))
# Where a framework's name may stand outside its folders, file by file, and why. Everything else that tells one
# framework from another is a field of its entry (utils/frameworks/<name>/), read by the code that needs it.
NAMED_ELSEWHERE = {
    "utils/frameworks/__init__.py": set(ENTRY_MODULES),  # the registry's list
    "utils/spec/stacks.py": {"mega", "prim", "nemo", "mbridge", "fsdp", "autotp", "torchtitan"},  # what each image
    # ships: the stack table's rows
    # DATA_PARALLEL's mode "fsdp" (fsdp | ddp), another vocabulary spelled as the framework is, named once
    "utils/config/native.py": {"fsdp"},
    # NeMo's and torchtitan's packages, spelled as the frameworks are, in the software versions the probe records
    # (a run in torchtitan's own environment names the torchtitan that trained) and the report shows
    "utils/machine/probe.py": {"nemo", "torchtitan"}, "evaluate/comparison/report.py": {"nemo"},
}
SHARED = ("data", "train", "evaluate", "utils")  # bench/ and tests/ name the frameworks they measure and check


def named(path: Path) -> set[str]:
    """The framework names a file spells as a whole string."""
    return {node.value for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in TABLE}


def test_nothing_outside_a_frameworks_folders_names_it():
    owners = {path: name for name in TABLE for path in own_files(name)}
    found = {}
    for path in (path for package in SHARED for path in sorted((ROOT / package).rglob("*.py"))):
        names = named(path) - ({owners[path]} if path in owners else set())
        if names:
            found[str(path.relative_to(ROOT))] = names
    assert found == NAMED_ELSEWHERE


def test_the_name_check_sees_a_name_in_a_comparison(tmp_path):
    planted = tmp_path / "report.py"
    planted.write_text("def note(framework):\n    return framework == 'torchtitan'\n")
    assert named(planted) == {"torchtitan"}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_a_framework_imports_nothing_of_another(name):
    prefixes = others_modules(name)
    crossing = sorted(f"{path.relative_to(ROOT)} imports {module}" for path in own_files(name)
                      for module in imported(path)
                      if any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes))
    assert crossing == []


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    planted = tmp_path / "launch.py"
    planted.write_text("def write():\n    from train.native.model import hf_config\n    import train.nemo.recipe\n")
    assert {"train.native.model", "train.nemo.recipe"} <= imported(planted)
    assert any(m.startswith(others_modules("mbridge")) for m in imported(planted))


@pytest.mark.parametrize("name", sorted(TABLE))
def test_a_frameworks_launch_builds_from_the_builder_not_the_dispatch_that_imports_it(name):
    """train/launch/command.py imports each framework's launch module through its entry: were that module to import
    the dispatch back, the two would import in a loop."""
    assert [str(path.relative_to(ROOT)) for path in own_files(name)
            if any(m == "train.launch.command" or m.startswith("train.launch.command.") for m in imported(path))] == []


def test_a_log_format_that_cannot_be_loaded_is_one_line_and_exit_2(tmp_path):
    """A framework kept outside the repository whose entry names a missing format module: evaluate's tools say so
    before reading any log."""
    (tmp_path / "outside.py").write_text(
        "from utils.frameworks import Framework\n"
        "FRAMEWORK = Framework('outside', 'Outside', ('cpu',), 'megatron', (), command='m:f', "
        "log_format='outside_logs:FORMAT')\n")
    out = subprocess.run([sys.executable, "-m", "evaluate.extract", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": f"{ROOT}:{tmp_path}", "TPRIMAT_FRAMEWORKS": "outside"})
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == ("config error: framework outside's log_format outside_logs:FORMAT cannot be "
                                  "imported (No module named 'outside_logs'); fix its entry")
