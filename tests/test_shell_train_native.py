"""`FRAMEWORK=fsdp ./shell/run_train.sh` on the CPU, end to end: the real launcher, the torch-native trainer
(train/train_fsdp.py, FSDP2 over gloo on two processes), the judge, the summary and the comparison, on the tiny
Llama for a few steps (the matrix is the same for every model: test_shell_train_cpu.py runs both; fsdp trains the
tiny Qwen in test_train_fsdp_runs.py). The prepared DATA_DIR is the trainer tests' (tests/fixtures/train/data_dir.py),
written before the matrix starts so that no data stage runs."""

from __future__ import annotations

import pytest

from tests.fixtures.train.data_dir import make_data_dir
from tests.fixtures.train_matrix.shell import machine, read, run_dirs

STEPS = 6
FEW_STEPS = {"FRAMEWORK": "fsdp", "MODELS": "llama", "TRAIN_ITERS": str(STEPS), "WARMUP_STEPS": "1", "WARMUP_SKIP": "2",
             "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def fsdp_matrix(tmp_path_factory):
    """One run of the CPU matrix under fsdp, shared by the assertions below."""
    tmp_path = tmp_path_factory.mktemp("fsdp-matrix")
    fake = machine(tmp_path)
    make_data_dir(tmp_path / "data", ("llama",), documents=60)
    result = fake.run("shell/run_train.sh", **FEW_STEPS)
    return tmp_path, result


def test_fsdp_trains_the_tiny_model_on_the_cpu(fsdp_matrix):
    tmp_path, result = fsdp_matrix
    assert result.returncode == 0, result.output[-4000:]
    dirs = run_dirs(tmp_path / "output")
    assert [d.name for d in dirs] == ["fsdp-llama"]
    for run_dir, variant in zip(dirs, ("llama3.1-8b-tiny",)):
        data = read(run_dir / "result.json")
        assert (data["run"]["status"], data["framework"], data["model"]["variant"]) == ("ok", "fsdp", variant)
        assert data["performance"]["tokens_per_s_per_gpu"] > 0
        assert data["performance"]["breakdown"]["method"]  # forward / backward / optimizer, and how they were timed
        assert len((run_dir / "steps.jsonl").read_text().splitlines()) == STEPS
        assert read(run_dir / "launch.json")["status"] == "ok"


def test_the_fsdp_run_set_has_its_summary_report_and_comparison(fsdp_matrix):
    tmp_path, result = fsdp_matrix
    summary = [line.split()[:2] for line in result.stdout.splitlines() if line.startswith("fsdp-")]
    assert summary == [["fsdp-llama", "ok"]], result.output[-4000:]
    (run_set,) = {d.parent for d in run_dirs(tmp_path / "output")}
    for name in ("system.json", "report.md", "compare.png"):
        assert (run_set / name).is_file(), name
    assert "fsdp" in (run_set / "report.md").read_text()
