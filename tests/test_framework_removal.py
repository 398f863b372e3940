"""A framework is its folders and its registry line: in a copy of TPrimat without them, the rest of its platform's
frameworks still plan, dry-run (each command built by its own package) and have their logs read, and nothing else
had to change. The copy is a faked GPU node (tests/fixtures/train_matrix); what the framework leaves out of it is
train/<name>/, train/train_<name>.py, its train_<platform>_<name>_<model>.sh wrappers, utils/frameworks/<name>/ and
its name in ENTRY_MODULES."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

from tests.fixtures.train_matrix.shell import machine, run_dirs
from tests.shell_harness import REPO
from evaluate.logs.formats import by_name
from utils.frameworks import ENTRY_MODULES, TABLE
from utils.spec import stacks

LOGS = REPO / "tests" / "fixtures" / "logs"
# One log of each format (utils/frameworks/*/log_format.py, utils/frameworks/megatron_log.py) and whose it is.
LOG_OF = {"mega": "megatron.log", "prim": "primus.log", "nemo": "nemo_timed.log", "torchtitan": "torchtitan_timed.log"}
TIMED = {"nemo", "torchtitan"}  # their logs hold TPrimat's TPRIMAT_STEP lines too
READ_LOGS = ("import json, sys; from evaluate.logs.parse import parse_logs; "
             "print(json.dumps({path: parse_logs([path]).framework for path in sys.argv[1:]}))")


def without(root, name: str) -> None:
    """Take the framework out of a repository copy: its folders, its entry point and wrappers, its registry line."""
    for folder in (root / "train" / name, root / "utils" / "frameworks" / name):
        shutil.rmtree(folder)
    for path in [root / "train" / f"train_{name}.py", *(root / "train").glob(f"train_*_{name}_*.sh")]:
        path.unlink(missing_ok=True)
    registry = root / "utils" / "frameworks" / "__init__.py"
    left = ", ".join(f'"{other}"' for other in ENTRY_MODULES if other != name)
    text, count = re.subn(r"^ENTRY_MODULES = \([^)]*\)", f"ENTRY_MODULES = ({left},)", registry.read_text(), flags=re.M)
    assert count == 1
    registry.write_text(text)


def reader_left(owner: str, removed: str) -> str | None:
    """Whose steps a log of owner's format is credited to once `removed` is gone: the first framework left that
    registers its format, else the format it refines (Primus's log holds Megatron-LM's lines), else, for TPrimat's
    timer lines alone, the framework whose format says they may come first; None: no reader."""
    formats = {name: fmt for name, fmt in by_name().items() if name != removed}
    for fmt in (by_name()[owner], by_name()[owner].refines):
        left = [other for other, registered in formats.items() if fmt is not None and registered is fmt]
        if left:
            return left[0]
    return next((other for other, fmt in formats.items() if fmt.timer_first), None) if owner in TIMED else None


def platform_of(name: str) -> str:
    """The GPU platform to show the rest on: the framework's own (its vendor's, for a vendor's framework)."""
    return "amd" if TABLE[name].platforms == ("amd",) else "nvd"


@pytest.mark.parametrize("name", ENTRY_MODULES)
def test_without_a_frameworks_folders_the_rest_of_its_platform_still_runs(tmp_path, name):
    platform = platform_of(name)
    fake = machine(tmp_path, **{"nvidia" if platform == "nvd" else "amd": 8})
    without(fake.root, name)
    # the default stack's frameworks, or the older row's where the default's lacks it (nemo: nemo-25.04)
    stack = next(row for row in stacks.of(platform) if name in row.frameworks)
    result = fake.run("shell/train.sh", DRY_RUN="1", MODELS="llama", FRAMEWORK="all", STACK=stack.name)
    assert result.returncode == 0, result.output
    planned = {path.name.split("-")[0] for path in run_dirs(tmp_path / "output")}
    assert planned == {other for other in stack.frameworks if other != name}
    read = subprocess.run([sys.executable, "-c", READ_LOGS, *(str(LOGS / log) for log in LOG_OF.values())],
                          cwd=fake.root, capture_output=True, text=True, timeout=120)
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout) == {str(LOGS / log): reader_left(owner, name) for owner, log in LOG_OF.items()}
