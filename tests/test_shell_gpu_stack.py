"""The host runtime on a GPU node: the Python that would train must see the vendor's GPUs and stack, or
nothing starts; a result never says amd or nvd for work done on a CPU.

This machine's own Python is the real thing a GPU node's .venv would be (requirements/host.txt: PyPI's torch,
no GPU here, no Transformer Engine, NeMo or Primus); tests/fakebin/fake-gpu-python stands for an environment
that has the stack."""

from __future__ import annotations

import importlib.metadata
import sys

import pytest

from tests.fixtures.train_matrix.shell import machine, read, run_dirs
from tests.shell_harness import FAKEBIN

GPUS = {"amd": {"amd": 8}, "nvd": {"nvidia": 8}}
BUILD = {"amd": "ROCm", "nvd": "CUDA"}


def the_error(result) -> str:
    """The one line a refused start prints (and nothing after it)."""
    assert result.returncode == 2, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and result.stderr.rstrip().endswith(errors[0]), result.stderr
    return errors[0]


@pytest.mark.parametrize("platform", ["amd", "nvd"])
def test_a_python_without_the_vendor_stack_stops_the_host_runtime_before_training(tmp_path, platform):
    fake = machine(tmp_path, **GPUS[platform])  # TPRIMAT_PYTHON: this machine's CPU-only Python
    result = fake.run("shell/run_train.sh", MOCK_DATA="1")
    error = the_error(result)
    assert "runtime: host (no Docker engine answers" in result.stderr
    assert f"PLATFORM={platform}: {sys.executable} cannot train" in error
    # .venv's torch is PyPI's CUDA build (requirements/host.txt): on NVIDIA it is the GPU it lacks, not the build
    cuda_torch = platform == "nvd" and importlib.metadata.version("torch").split("+")[-1] != "cpu"
    lacks = "sees no NVIDIA GPU" if cuda_torch else f"is not a {BUILD[platform]} build"
    assert lacks in error and "no transformer_engine" in error
    assert "RUNTIME=docker" in error and "TPRIMAT_PYTHON" in error  # the two ways out
    assert not (tmp_path / "output").exists()


def test_the_host_runtime_on_a_gpu_node_never_builds_a_cpu_venv_to_train_with(tmp_path):
    fake = machine(tmp_path, amd=8)
    del fake.env["TPRIMAT_PYTHON"]
    venv = tmp_path / "no-venv"
    error = the_error(fake.run("shell/run_train.sh", TPRIMAT_VENV=str(venv)))
    assert f"no working Python at {venv}/bin/python" in error and "TPRIMAT_PYTHON" in error
    assert not venv.exists()


def test_each_framework_needs_its_own_modules(tmp_path):
    fake = machine(tmp_path, nvidia=8)
    facts = '{"torch": "2.7.0+cu128", "hip": null, "cuda": "12.8", "gpus": 8, "modules": {"transformer_engine": ""}}'
    error = the_error(fake.run("shell/run_train.sh", TPRIMAT_PYTHON=str(FAKEBIN / "fake-gpu-python"),
                               FAKE_REAL_PYTHON=sys.executable, FAKE_STACK_FACTS=facts, STACK="nemo-25.04"))
    assert ("cannot train mega,nemo,fsdp,autotp on NVIDIA GPUs: no megatron.core, no nemo, no transformers, "
            "no deepspeed;") in error


def test_prim_needs_its_primus_checkout(tmp_path):
    fake = machine(tmp_path, amd=8)
    error = the_error(fake.run("shell/run_train.sh", FRAMEWORK="prim", PRIMUS_PATH=str(tmp_path / "none"),
                               TPRIMAT_PYTHON=str(FAKEBIN / "fake-gpu-python"), FAKE_REAL_PYTHON=sys.executable))
    assert (f"cannot train prim on AMD GPUs: no Primus v26.5 checkout at {tmp_path / 'none'} (PRIMUS_PATH; it holds "
            "primus-cli)") in error


def test_a_gpu_that_torch_cannot_see_is_named(tmp_path):
    fake = machine(tmp_path, amd=8)
    facts = '{"torch": "2.10.0+rocm7.1", "hip": "7.1", "cuda": null, "gpus": 0, "modules": {}}'
    error = the_error(fake.run("shell/run_train.sh", FRAMEWORK="mega", TPRIMAT_PYTHON=str(FAKEBIN / "fake-gpu-python"),
                               FAKE_REAL_PYTHON=sys.executable, FAKE_STACK_FACTS=facts))
    assert "torch 2.10.0+rocm7.1 sees no AMD GPU, no transformer_engine, no megatron.core;" in error


def test_a_python_with_the_stack_trains_on_the_host_runtime(tmp_path):
    fake = machine(tmp_path, amd=8)
    result = fake.run("shell/run_train.sh", FRAMEWORK="prim", MODELS="llama", MOCK_DATA="1", TRAIN_ITERS="4",
                      WARMUP_STEPS="1", WARMUP_SKIP="1", TPRIMAT_PYTHON=str(FAKEBIN / "fake-gpu-python"),
                      FAKE_REAL_PYTHON=sys.executable)
    assert result.returncode == 0, result.output
    assert result.calls_of("fake-gpu-python") == [["fake-gpu-python", "-m", "evaluate.probe", "--stack-facts",
                                                   "--frameworks", "prim"]]
    (run_dir,) = run_dirs(tmp_path / "output")
    assert read(run_dir / "result.json")["run"]["status"] == "ok"


@pytest.mark.parametrize("platform", ["amd", "nvd"])
def test_a_dry_run_plans_without_the_stack_and_says_a_real_run_would_stop(tmp_path, platform):
    fake = machine(tmp_path, **GPUS[platform])
    del fake.env["TPRIMAT_PYTHON"]
    venv = tmp_path / "no-venv"
    result = fake.run("shell/run_train.sh", DRY_RUN="1", TPRIMAT_VENV=str(venv), FRAMEWORK="mega")
    assert result.returncode == 0, result.output
    (warning,) = [line for line in result.stderr.splitlines() if "a real run would stop here: PLATFORM=" in line]
    assert f"{venv}/bin/python cannot train" in warning and "TPRIMAT_PYTHON" in warning
    assert len(run_dirs(tmp_path / "output")) == 2 and not venv.exists()


@pytest.mark.parametrize("script", ["train/train_amd_mega_llama.sh", "train/train_nvd_nemo_qwen.sh"])
def test_the_launcher_refuses_a_gpu_run_its_python_would_do_on_the_cpu(tmp_path, script):
    """One run started by hand (no shell/run_train.sh): the trainer would run in this CPU-only Python."""
    platform = script.split("_")[1]
    fake = machine(tmp_path, **GPUS[platform])
    error = the_error(fake.run(script, MOCK_DATA="1", STACK="nemo-25.04"))  # NeMo 2's stack
    assert error.startswith(f"[tprimat] error: PLATFORM={platform}: {sys.executable} cannot train")
    assert not (tmp_path / "output").exists()


def test_a_slurm_job_without_a_container_checks_the_stack_where_the_gpus_are_before_any_node_starts(tmp_path):
    """SLURM_CONTAINER=none (Slurm's default here) is the host runtime on the compute nodes."""
    from tests.test_slurm_job import ALLOCATION, with_scontrol

    fake = machine(tmp_path, amd=8)
    run_set = tmp_path / "run-set"
    run_set.mkdir()
    job = tmp_path / "job.sh"
    job.write_text(f"source {fake.root}/shell/slurm_job.sh\ntp_job_prepare\n")
    result = fake.run(str(job), PATH=with_scontrol(fake, tmp_path, "10.8.0.7"), RUN_SET_DIR=str(run_set),
                      PLATFORM="amd", DP="16", GA="4", **ALLOCATION)
    assert f"PLATFORM=amd: {sys.executable} cannot train mega,prim,fsdp,autotp on AMD GPUs" in the_error(result)
    assert not (run_set / "slurm.json").exists()
