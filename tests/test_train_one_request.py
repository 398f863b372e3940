"""One request from plan to trainer: the matrix plans every run's request (train.plan.request) from the one
configuration it loaded and hands it to the launcher (python3 -m train.launch.run --request FILE), which neither loads
the configuration nor plans the run again; a run by hand (train/launch.sh) loads it once and plans its own.

The loads are counted in every Python process a command starts by a sitecustomize that wraps
utils.config.load_config (tests/fixtures/train_matrix/count_loads/sitecustomize.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.train_matrix.requests import node
from tests.fixtures.train_matrix.shell import machine, request, run_dirs
from train import matrix, plan
from train.launch import run as launch
from utils.cli import UsageError
from utils.spec.request import Request

COUNTER = Path(__file__).resolve().parent / "fixtures" / "train_matrix" / "count_loads"

# What loads the configuration in a run set of ./shell/run_train.sh, in order, and why each must:
SHELL_LOADS = [
    "utils.config get",  # stage.sh: Slurm or not (LAUNCH_MODE), before anything else is decided
    "utils.config env",  # stage.sh: validated and exported on the host, to pick the runtime
    "utils.config env",  # shell/train.sh: validated and exported again in the runtime (a container's may differ)
]
MATRIX_LOAD = ["train.matrix"]  # the plan of the run set, every run's request among it


def counted(fake, script: str, log: Path, **env: str):
    """The command's result and the load_config calls of every process it started, in order."""
    result = fake.run(script, PYTHONPATH=str(COUNTER), TPRIMAT_TEST_CONFIG_LOADS=str(log),
                      TPRIMAT_TEST_ROOT=str(fake.root), **env)
    assert result.returncode == 0, result.output[-3000:]
    return result, log.read_text().splitlines() if log.exists() else []


def test_a_run_set_loads_the_configuration_once_in_python_whatever_its_number_of_runs(tmp_path):
    fake = machine(tmp_path)  # a CPU node
    result, loads = counted(fake, "shell/run_train.sh", tmp_path / "loads.log", DRY_RUN="1", MOCK_DATA="1",
                            MODELS="llama,qwen", FRAMEWORK="all", RUNS="2")
    dirs = run_dirs(tmp_path / "output")
    assert len(dirs) == 12  # mega, fsdp and autotp x llama and qwen x 2 repeats
    # None per run: before the matrix handed each run its request, each also loaded it twice (train/launch.sh's
    # export and train.launch.run's plan), 4 + 2 x 12 = 28 here.
    assert loads == SHELL_LOADS + MATRIX_LOAD
    for run_dir in dirs:
        req = request(run_dir)
        assert req.model.variant == req.identity.variant and (run_dir / "launch.json").exists()
    assert result.stdout.count("[tprimat] dry run: wrote config.json, launch.json; nothing trained") == 12


def test_a_run_started_by_hand_loads_the_configuration_once(tmp_path):
    fake = machine(tmp_path)
    _, loads = counted(fake, "train/train_cpu_mega_llama.sh", tmp_path / "loads.log", DRY_RUN="1", MOCK_DATA="1")
    assert loads == ["train.launch.run"]
    (run_dir,) = run_dirs(tmp_path / "output")
    assert request(run_dir).identity.framework == "mega"


@pytest.fixture
def cpu_node(tmp_path, monkeypatch):
    for key, value in {"TPRIMAT_DETECTED_PLATFORM": "cpu", "TPRIMAT_DETECTED_GPUS": "0", "DRY_RUN": "1",
                       "MOCK_DATA": "1", "OUTPUT_DIR": str(tmp_path / "output")}.items():
        monkeypatch.setenv(key, value)
    return monkeypatch


def handed_over(tmp_path, **env: str) -> tuple[Request, Path]:
    """The first run of a CPU plan as the matrix hands it over: its request written, the launcher's command."""
    cfg = node("cpu", 0, DRY_RUN="1", MOCK_DATA="1", FRAMEWORK="mega", MODELS="llama", **env)
    run = plan.build_plan(cfg)[0]
    command = matrix.hand_over(cfg, run, tmp_path / "set", "abc123")
    assert command[1:4] == ["-m", "train.launch.run", "--request"]
    return plan.request(cfg, run, commit="abc123"), Path(command[4])


def test_the_launcher_runs_the_request_it_is_handed_without_loading_the_configuration(tmp_path, cpu_node):
    planned, path = handed_over(tmp_path)
    assert path == tmp_path / "set" / "mega-llama" / "config.json" and Request.read(path) == planned
    assert planned.identity.commit == "abc123"  # the checkout's, asked once for the run set

    def refused(*args, **kwargs):
        raise AssertionError("the launcher loaded the configuration")

    cpu_node.setattr(launch, "load_config", refused)
    assert launch.main(["--request", str(path)]) == 0
    record = json.loads((path.parent / "launch.json").read_text())
    assert record["run_id"] == "mega-llama" and "--request" in record["command"] and Request.read(path) == planned


def test_a_node_other_than_0_is_handed_its_own_request_beside_its_log(tmp_path, cpu_node):
    planned, path = handed_over(tmp_path, NNODES="2", GPUS_PER_NODE="1", DP="2", NODE_RANK="1",
                                MASTER_ADDR="127.0.0.1")
    run_dir = tmp_path / "set" / "mega-llama"
    assert path == run_dir / "node1" / "request.json" and Request.read(path).environment.node_rank == 1
    assert launch.main(["--request", str(path)]) == 0
    assert json.loads((run_dir / "node1" / "launch.json").read_text())["node_rank"] == 1
    assert not (run_dir / "config.json").exists()  # node 0's, written by node 0's matrix


def test_a_run_directory_that_holds_a_run_is_not_handed_over(tmp_path, cpu_node, capsys):
    handed_over(tmp_path)
    cfg = node("cpu", 0, DRY_RUN="1", MOCK_DATA="1", FRAMEWORK="mega", MODELS="llama")
    assert matrix.hand_over(cfg, plan.build_plan(cfg)[0], tmp_path / "set", None) is None
    assert "already holds a run; nothing is overwritten: choose a new RUN_SET_DIR" in capsys.readouterr().err
    with pytest.raises(UsageError, match="already holds a run"):
        launch.claim(tmp_path / "set" / "mega-llama", 0)


def test_the_launcher_takes_a_request_or_a_run_to_plan_not_both(capsys):
    for argv in (["--request", "x.json", "--platform", "cpu"], ["--request", "x.json", "--run-dir", "elsewhere"],
                 ["--platform", "cpu", "--framework", "mega"]):
        with pytest.raises(SystemExit) as stopped:
            launch.main(argv)
        assert stopped.value.code == 2
    assert capsys.readouterr().err.count("give --request FILE (the run directory is its own), or --platform") == 3
