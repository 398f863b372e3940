"""What a framework's runs need built on a platform (its registry entry's `environment` hook) is built before the run
set, beside the sample data's preparation, and one that cannot be built stops the run set in one line; autotp's hook
builds DeepSpeed's CPU collective op once, in a process of its own."""

from __future__ import annotations

import subprocess
import threading

import pytest

from tests.test_utils_config import CPU_MACHINE
from train import matrix, plan
from train.autotp import environment as autotp_environment
from utils.cli import UsageError
from utils.config import load_config


def sample_config(tmp_path):
    return load_config({**CPU_MACHINE, "DATA_DIR": str(tmp_path), "DATASET": "sample", "MODELS": "llama",
                        "MOCK_DATA": "0"})


def test_the_environments_are_built_while_the_sample_data_is_prepared(tmp_path, monkeypatch):
    building, built = threading.Event(), threading.Event()
    seen = {}

    def build(cfg, runs):
        building.set()
        built.wait(timeout=10)

    def data_stage(argv, **kwargs):
        seen["building while the data is prepared"] = building.wait(timeout=10)
        built.set()
        return subprocess.CompletedProcess(argv, 0)

    ready = iter([False, True])  # missing, then prepared by shell/data.sh
    monkeypatch.setattr(plan, "report_data_problems", lambda cfg: next(ready))
    monkeypatch.setattr(matrix, "refuse_short_validation", lambda cfg: None)
    monkeypatch.setattr(matrix, "build_environments", build)
    monkeypatch.setattr(matrix.subprocess, "run", data_stage)
    cfg = sample_config(tmp_path)
    beside = matrix.Beside(cfg, [])
    matrix.check_data(cfg, matrix.Stop(), beside)
    beside.finish(matrix.Stop())
    assert seen == {"building while the data is prepared": True} and not beside.is_alive()


def test_with_the_data_ready_they_are_built_before_the_run_set(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(plan, "report_data_problems", lambda cfg: True)
    monkeypatch.setattr(matrix, "refuse_short_validation", lambda cfg: None)
    monkeypatch.setattr(matrix, "build_environments", lambda cfg, runs: calls.append(runs))
    cfg = sample_config(tmp_path)
    beside = matrix.Beside(cfg, [])
    matrix.check_data(cfg, matrix.Stop(), beside)
    assert calls == []
    beside.finish(matrix.Stop())
    assert calls == [[]]


def test_an_environment_that_cannot_be_built_stops_the_run_set_in_one_line(tmp_path, monkeypatch, capsys):
    def refuse(cfg, runs):
        raise UsageError("torchtitan on the CPU needs its environment, which could not be installed")

    monkeypatch.setattr(matrix, "build_environments", refuse)
    with pytest.raises(SystemExit) as stopped:
        matrix.Beside(sample_config(tmp_path), []).finish(matrix.Stop())
    assert stopped.value.code == 2
    assert capsys.readouterr().err == ("[tprimat] error: torchtitan on the CPU needs its environment, which could not "
                                       "be installed\n")


def test_an_unexpected_failure_of_a_build_is_raised_in_the_matrixs_own_thread(tmp_path, monkeypatch):
    def fail(cfg, runs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(matrix, "build_environments", fail)
    with pytest.raises(OSError, match="No space left on device"):
        matrix.Beside(sample_config(tmp_path), []).finish(matrix.Stop())


@pytest.fixture
def extensions(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    return tmp_path


def test_autotp_builds_deepspeeds_cpu_op_once_in_a_process_of_its_own(extensions, monkeypatch, capsys):
    builds = []

    def build(argv, **kwargs):
        builds.append((argv[1:], kwargs["env"]["DS_ACCELERATOR"]))
        library = extensions / autotp_environment.OP_NAME / f"{autotp_environment.OP_NAME}.so"
        library.parent.mkdir()
        library.write_bytes(b"")
        return subprocess.CompletedProcess(argv, 0, stderr="")

    monkeypatch.setattr(autotp_environment.subprocess, "run", build)
    assert autotp_environment.environment("cpu") == {} and autotp_environment.environment("cpu") == {}
    assert builds == [(["-c", autotp_environment.BUILD], "cpu")]
    assert capsys.readouterr().err == (f"[tprimat] building DeepSpeed's CPU collective op into {extensions} (autotp on "
                                       f"the CPU; once)\n")
    assert autotp_environment.environment("nvd") == {} and autotp_environment.environment("cpu", False) == {}
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")  # started without shell/lib.sh: the first autotp run builds it
    assert autotp_environment.environment("cpu") == {}
    assert len(builds) == 1


def test_an_op_that_does_not_build_is_a_warning_naming_the_compilers_last_line(extensions, monkeypatch, capsys):
    monkeypatch.setattr(autotp_environment.subprocess, "run", lambda argv, **kwargs: subprocess.CompletedProcess(
        argv, 1, stderr="ninja: build stopped\nRuntimeError: Error building extension 'deepspeed_shm_comm'\n\n"))
    assert autotp_environment.environment("cpu") == {}
    assert autotp_environment.main([]) == 1
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == ["[tprimat] warning: DeepSpeed's CPU collective op did not build (RuntimeError: Error building "
                        "extension 'deepspeed_shm_comm'); autotp cannot train on the CPU until it does"] * 2
