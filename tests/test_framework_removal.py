"""A framework is its folders and its registry line: in a copy of TPrimat without them, the rest of its platform's
frameworks are still planned, each run's command is built by its own package as the launcher builds it, and their
logs are read, and nothing else had to change. The copy is the repository copy of a faked GPU node
(tests/fixtures/train_matrix); what the framework leaves out of it is train/<name>/, train/train_<name>.py, its
train_<platform>_<name>_<model>.sh wrappers, utils/frameworks/<name>/ and its name in ENTRY_MODULES. One process
per framework does the work of a dry run's launchers (tests/test_shell_train_matrix.py runs the dry run itself)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.fixtures.train_matrix.shell import machine, prepared_data
from tests.shell_harness import REPO
from evaluate.logs.formats import by_name
from utils.frameworks import ENTRY_MODULES, TABLE
from utils.spec import stacks

LOGS = REPO / "tests" / "fixtures" / "logs"
# One log of each format (utils/frameworks/*/log_format.py, utils/frameworks/megatron_log.py) and whose it is.
LOG_OF = {"mega": "megatron.log", "prim": "primus.log", "nemo": "nemo_timed.log", "torchtitan": "torchtitan_timed.log"}
TIMED = {"nemo", "torchtitan"}  # their logs hold TPrimat's TPRIMAT_STEP lines too
PLAN_AND_READ = """
import json, sys
from pathlib import Path
from evaluate.logs.parse import parse_logs
from train.launch.command import prepare
from train.plan import build_plan, request
from utils.config import load_config

cfg, out, built = load_config(), Path(sys.argv[1]), []
for run in (run for run in build_plan(cfg) if not run.skipped):
    (out / run.name).mkdir(parents=True)
    prepare(request(cfg, run), out / run.name, out / run.name)
    built.append(run.framework)
print(json.dumps({"built": built, "read": {path: parse_logs([path]).framework for path in sys.argv[2:]}}))
"""


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
    fake = machine(tmp_path)
    prepared_data(tmp_path / "data", "bc", ("llama",))
    without(fake.root, name)
    # the default stack's frameworks, or the older row's where the default's lacks it (nemo: nemo-25.04)
    stack = stacks.having(name, platform)
    env = {**os.environ, **fake.env, "TPRIMAT_DETECTED_PLATFORM": platform, "TPRIMAT_DETECTED_GPUS": "8",
           "PLATFORM": platform, "STACK": stack.name, "FRAMEWORK": "all", "MODELS": "llama", "DATASET": "bc"}
    done = subprocess.run([sys.executable, "-c", PLAN_AND_READ, str(tmp_path / "runs"),
                           *(str(LOGS / log) for log in LOG_OF.values())],
                          cwd=fake.root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["built"] == [other for other in stack.frameworks if other != name]
    assert found["read"] == {str(LOGS / log): reader_left(owner, name) for owner, log in LOG_OF.items()}
