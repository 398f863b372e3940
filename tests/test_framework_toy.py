"""A framework is one registry entry and its package: a toy framework that TPrimat's code never names goes through
the dry run, the plan, its command, a real run judged from its log, and the report, registered from outside the
repository (TPRIMAT_FRAMEWORKS) with its package in a folder of its own (tests/fixtures/toy_framework)."""

from __future__ import annotations

import shutil

import pytest

from tests.fixtures.train_matrix.shell import machine, read, run_dirs
from tests.shell_harness import REPO

TOY = REPO / "tests" / "fixtures" / "toy_framework"


@pytest.fixture
def toy_node(tmp_path):
    """The CPU node with the toy framework installed beside the repository and registered by its entry module."""
    plugins = tmp_path / "plugins"
    shutil.copytree(TOY, plugins / "toy_framework", ignore=shutil.ignore_patterns("__pycache__"))
    fake = machine(tmp_path)
    fake.env.update(PYTHONPATH=str(plugins), TPRIMAT_FRAMEWORKS="toy_framework.entry", PLATFORM="cpu",
                    MODELS="llama", MOCK_DATA="1", TELEMETRY="0")
    return fake


def test_the_plan_lists_the_toy_and_skips_what_its_entry_says_it_cannot_do(toy_node):
    result = toy_node.run("shell/train.sh", FRAMEWORK="toy,mega", PP="2", DP="1", DRY_RUN="1")
    assert result.returncode == 0, result.output
    assert "toy-llama skipped: toy has no pipeline parallelism (PP=2)" in result.stderr


def test_a_dry_run_writes_the_toys_request_and_the_command_its_package_builds(toy_node):
    result = toy_node.run("shell/train.sh", FRAMEWORK="toy", DRY_RUN="1")
    assert result.returncode == 0, result.output
    (run_dir,) = run_dirs(toy_node.root.parent / "output")
    assert run_dir.name == "toy-llama"
    assert read(run_dir / "config.json")["identity"]["framework"] == "toy"
    assert read(run_dir / "launch.json")["command"][1:] == ["-m", "toy_framework.trainer", str(run_dir / "config.json")]


def test_a_toy_run_is_judged_from_its_log_and_reported_under_its_display_name(toy_node):
    result = toy_node.run("shell/train.sh", FRAMEWORK="toy", TRAIN_ITERS="12", WARMUP_SKIP="2", WARMUP_STEPS="1")
    assert result.returncode == 0, result.output
    (run_dir,) = run_dirs(toy_node.root.parent / "output")
    found = read(run_dir / "result.json")
    assert (found["framework"], found["run"]["status"], found["run"]["source"]) == ("toy", "ok", "extract")
    assert len(found["series"]["loss"]) == 12 and found["series"]["loss"][-1] < found["series"]["loss"][0]
    assert found["performance"]["tokens_per_s_per_gpu"] > 0
    report = (run_dir.parent / "report.md").read_text()
    assert "Toy" in report
