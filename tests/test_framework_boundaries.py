"""A framework's code imports no other framework's: each framework's modules (train/<name>/, train/train_<name>.py and
its registry entry utils/frameworks/<name>.py) may import what all share (train/common, train/launch, train/native
for the torch-native ones, utils/, evaluate/) but nothing of another framework. What two share moves to a shared
module (train/common/megatron_settings.py for NeMo and Megatron-Bridge, train/common/hf_config.py for the Hugging
Face config the torch-native frameworks and Megatron-Bridge build from)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from utils.frameworks import TABLE

ROOT = Path(__file__).resolve().parent.parent


def own_files(name: str) -> list[Path]:
    """The framework's own Python files."""
    folder = ROOT / "train" / name
    files = sorted(folder.rglob("*.py")) if folder.is_dir() else []
    return files + [path for path in (ROOT / "train" / f"train_{name}.py", ROOT / "utils" / "frameworks" / f"{name}.py")
                    if path.is_file()]


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
