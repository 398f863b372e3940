"""data.verify and the mega trainer under every megatron-core the vendor images carry, installed for real.

nvcr.io/nvidia/nemo:25.04 carries megatron-core 0.12.x; Primus v25.11 pins Megatron-LM 0.15.0rc8 (PyPI's
closest line is 0.15) and Primus v26.5 carries 0.16; the host runs requirements/host.txt's 0.19.2. Each
version of requirements/megatron-matrix.txt is installed from PyPI without its dependencies (it reuses .venv's
torch) as a tests.fixtures.envs overlay, built once per machine, and put before .venv's site-packages through
PYTHONPATH. PyPI has no Python 3.12 wheel of 0.12.3: its source release is built (it compiles helpers.cpp),
as the 25.04 image, whose Python is 3.12 too, carries it.

The AMD image imports megatron-core from Primus's Megatron-LM source checkout, which has helpers.cpp but
no compiled helpers_cpp: the tests at the end stand in for it with a copy of the installed package
without that module.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import envs
from tests.fixtures.train.data_dir import make_data_dir
from tests.test_data_verify import good  # noqa: F401 - the sound qwen pair of the sample corpus (fixture)
from tests.test_train_mega_runs import Run, assert_trained, train

ROOT = Path(__file__).resolve().parent.parent
MATRIX = ROOT / "requirements" / "megatron-matrix.txt"


def pinned(path: Path) -> list[str]:
    """The megatron-core versions a requirements file pins (megatron-core==X lines)."""
    return [line.split("==", 1)[1].split()[0] for line in path.read_text().splitlines()
            if line.startswith("megatron-core==")]


HOST_VERSION = pinned(ROOT / "requirements" / "host.txt")[0]
VERSIONS = [*pinned(MATRIX), HOST_VERSION]


# megatron-core 0.15 compiles a CUDA allocator as it is imported when torch is a CUDA build (PyPI's), and catches a
# build that fails, but not torch's IndexError on a machine without a GPU to choose an architecture for (0.16 checks
# first). The runs under every version get an architecture and a CUDA toolkit that is not there, so that the build
# fails as 0.15 expects, as it does where no toolkit is installed.
NO_CUDA_BUILD = {"TORCH_CUDA_ARCH_LIST": "9.0", "CUDA_HOME": "/nonexistent/cuda"}


@pytest.fixture(scope="session")
def pythonpath() -> dict[str, str]:
    """PYTHONPATH per version: the installed overlay, or nothing for .venv's own megatron-core."""
    return {version: "" if version == HOST_VERSION else
            str(envs.overlay(f"megatron-core-{version}", [f"megatron-core=={version}"])) for version in VERSIONS}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return make_data_dir(tmp_path_factory.mktemp("data"), model_keys=("llama",))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data_dir, pythonpath):
    """A 2-step tiny llama run on the sample-shaped data per version, trained once on first use."""
    done: dict[str, Run] = {}

    def get(version: str) -> Run:
        if version not in done:
            done[version] = train(tmp_path_factory.mktemp(f"mega-{version}") / "run", data_dir, TRAIN_ITERS=2,
                                  WARMUP_STEPS=1, PYTHONPATH=pythonpath[version], **NO_CUDA_BUILD)
        return done[version]

    return get


def python(pythonpath: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    # NO_VCS_VERSION: megatron-core 0.17+ appends the commit of a git repository around its files to __version__
    # (.venv lies inside this one); the probe reads the release from package_info.py, as a wheel has it.
    env = {**os.environ, "PYTHONPATH": pythonpath, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore",
           "NO_VCS_VERSION": "1", **NO_CUDA_BUILD}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, **kwargs)


def verify(pythonpath: str, pair: tuple[Path, Path], tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    """data.verify on a copy of the pair (GPTDataset: 100 samples of 64 tokens); returns its run and prefix."""
    prefix, tokenizer = pair
    copy = tmp_path / "pair_text_document"
    for suffix in (".bin", ".idx"):
        shutil.copy(f"{prefix}{suffix}", f"{copy}{suffix}")
    out = python(pythonpath, "-m", "data.verify", "--prefix", str(copy), "--tokenizer", str(tokenizer),
                 "--seq-length", "64", "--samples", "100")
    return out, copy


@pytest.mark.parametrize("version", VERSIONS)
def test_the_version_imported_is_the_one_installed_and_the_probe_records_it(pythonpath, version):
    out = python(pythonpath[version], "-c", "import json, megatron.core; from utils.machine.probe import software_info; "
                 "print(json.dumps([megatron.core.__version__, software_info()['megatron_core']]))")
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == [version, version]  # imported, and recorded in system.json


@pytest.mark.parametrize("version", VERSIONS)
def test_data_verify_builds_gpt_samples_and_writes_the_manifest(pythonpath, good, tmp_path, version):  # noqa: F811
    out, prefix = verify(pythonpath[version], good, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    manifest = json.loads(Path(f"{prefix}.manifest.json").read_text())
    assert manifest["verified"] is True and manifest["statistics"]["gpt_samples"] >= 100


@pytest.mark.parametrize("version", VERSIONS)
def test_a_two_step_tiny_mega_run_trains_and_reads_its_settings_back(runs, data_dir, version):
    run = runs(version)
    assert_trained(run, 2)
    assert all(math.isfinite(loss) for loss in run.series("loss"))
    effective = run.result["effective"]
    assert {key: effective[key] for key in ("tp", "pp", "dp", "ga", "mbs", "seq_len", "steps", "warmup_steps")} == \
        {"tp": 1, "pp": 1, "dp": 1, "ga": 1, "mbs": 2, "seq_len": 64, "steps": 2, "warmup_steps": 1}
    assert effective["distributed_optimizer"] is True and effective["optimizer"] == "AdamW"
    assert effective["dataset_class"] == "GPTDataset"
    assert effective["data_path"] == str(data_dir / "sample_llama_text_document")


def test_every_version_trains_the_same_losses_on_the_same_schedule(runs):
    """The same seed, weights (TPrimat draws them itself) and samples: the versions differ only by rounding."""
    first = runs(VERSIONS[0])
    for version in VERSIONS[1:]:
        assert runs(version).series("loss") == pytest.approx(first.series("loss"), abs=1e-4), version
        assert runs(version).series("lr") == pytest.approx(first.series("lr")), version


@pytest.fixture
def source_checkout(tmp_path) -> Path:
    """megatron as a Megatron-LM checkout holds it: the installed package less its compiled helpers_cpp."""
    import megatron.core

    installed = Path(megatron.core.__file__).parent.parent
    checkout = tmp_path / "checkout"
    shutil.copytree(installed, checkout / "megatron", ignore=shutil.ignore_patterns("helpers_cpp*", "__pycache__"))
    return checkout


def makefile(checkout: Path, recipe: str) -> Path:
    """The checkout's megatron/core/datasets/Makefile with one recipe (Megatron-LM's compiles helpers.cpp)."""
    datasets = checkout / "megatron" / "core" / "datasets"
    (datasets / "Makefile").write_text(f"all:\n\t{recipe}\n")
    return datasets


def test_a_source_checkout_gets_its_dataset_helpers_compiled_before_verify(
        source_checkout, good, tmp_path):  # noqa: F811
    import megatron.core.datasets.helpers_cpp as built

    # Stands in for the compiler: make puts the wheel's own build of helpers.cpp in place.
    datasets = makefile(source_checkout, f"cp {built.__file__} .")
    out, prefix = verify(str(source_checkout), good, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (datasets / Path(built.__file__).name).is_file()
    assert json.loads(Path(f"{prefix}.manifest.json").read_text())["verified"] is True


def test_dataset_helpers_that_cannot_be_compiled_stop_verify_and_the_trainer_in_one_line(
        source_checkout, good, data_dir, tmp_path):  # noqa: F811
    datasets = makefile(source_checkout, "@echo 'fatal error: pybind11/pybind11.h: No such file' >&2; exit 1")
    expected = (f"{datasets}: megatron-core's dataset helpers (helpers_cpp) are not compiled and "
                f"`make -C {datasets}` failed")
    out, prefix = verify(str(source_checkout), good, tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(f"data.verify: error: {expected}")
    assert not Path(f"{prefix}.manifest.json").exists()
    run = train(tmp_path / "run", data_dir, TRAIN_ITERS=2, WARMUP_STEPS=1, PYTHONPATH=str(source_checkout))
    assert run.returncode == 2 and "Traceback" not in run.console
    assert run.console.strip().splitlines()[-1].startswith(f"train_mega: {expected}")
    assert run.result["run"]["status"] == "failed" and run.steps == []


def test_the_trainer_compiles_the_helpers_once_on_rank_0_while_the_other_ranks_wait(
        source_checkout, data_dir, tmp_path):
    import megatron.core.datasets.helpers_cpp as built

    made = tmp_path / "make.log"
    makefile(source_checkout, f"echo made >> {made}; cp {built.__file__} .")
    run = train(tmp_path / "run", data_dir, DP=2, MBS=1, TRAIN_ITERS=2, WARMUP_STEPS=1,
                PYTHONPATH=str(source_checkout))
    assert_trained(run, 2)
    assert made.read_text() == "made\n"
