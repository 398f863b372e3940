"""./shell/run_train.sh on the CPU, end to end: the real launcher, trainer, extraction and comparison.

The runs are the tiny models over gloo with a handful of steps; the data is the trainer tests'
small prepared DATA_DIR (tests/fixtures/train/data_dir.py), so each run takes seconds of compute.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.shell_harness import FakeMachine
from tests.fixtures.train_matrix.shell import machine, read, run_dirs

FEW_STEPS = {"TRAIN_ITERS": "4", "WARMUP_STEPS": "1", "WARMUP_SKIP": "1", "HF_HUB_OFFLINE": "1"}
# Stand-in for the data stage (shell/data.sh, the data issue's): writes the small prepared DATA_DIR.
DATA_STAGE = f"""#!/usr/bin/env bash
set -euo pipefail
echo "data stage called" >> "${{DATA_DIR}}.calls"
cd "$(dirname "${{BASH_SOURCE[0]}}")/.."
"{sys.executable}" -c "import sys; from pathlib import Path; sys.path.insert(0, '{Path(__file__).resolve().parent.parent}');
from tests.fixtures.train.data_dir import make_data_dir; make_data_dir(Path('${{DATA_DIR}}'), documents=60)"
"""


def cpu_machine(tmp_path: Path) -> FakeMachine:
    fake = machine(tmp_path)
    (fake.root / "shell" / "data.sh").write_text(DATA_STAGE)
    return fake


def test_the_cpu_default_prepares_its_sample_data_and_runs_both_tiny_models(tmp_path):
    fake = cpu_machine(tmp_path)
    result = fake.run("shell/run_train.sh", **FEW_STEPS)
    assert result.returncode == 0, result.output[-3000:]
    assert (tmp_path / "data.calls").read_text() == "data stage called\n"
    llama, qwen = run_dirs(tmp_path / "output")
    run_set = llama.parent
    assert qwen.parent == run_set and run_set.name.endswith("-cpu")
    for run_dir, variant in ((llama, "llama3.1-8b-tiny"), (qwen, "qwen2.5-7b-tiny")):
        outcome = read(run_dir / "result.json")
        assert outcome["run"]["status"] == "ok" and outcome["model"]["variant"] == variant
        assert outcome["performance"]["tokens_per_s_per_gpu"] > 0
        assert len((run_dir / "steps.jsonl").read_text().splitlines()) == 4
        assert "iteration        4/       4" in (run_dir / "train.log").read_text()
    for name in ("system.json", "compare.png", "report.md"):
        assert (run_set / name).is_file(), name
    summary = [line.split()[:2] for line in result.stdout.splitlines() if line.startswith("mega-")]
    assert summary == [["mega-llama", "ok"], ["mega-qwen", "ok"]]


def test_a_failing_second_run_is_recorded_and_the_first_kept(tmp_path):
    fake = cpu_machine(tmp_path)
    data = tmp_path / "data"
    from tests.fixtures.train.data_dir import make_data_dir

    make_data_dir(data, documents=60)
    (data / "sample_qwen_text_document.bin").write_bytes(b"")  # corrupted after verification
    result = fake.run("shell/run_train.sh", **FEW_STEPS)
    assert result.returncode == 1
    assert not (tmp_path / "data.calls").exists()  # the data was there: no preparation
    llama, qwen = run_dirs(tmp_path / "output")
    assert read(llama / "result.json")["run"]["status"] == "ok"
    failed = read(qwen / "result.json")
    assert failed["run"]["status"] == "failed" and failed["run"]["exit_code"] != 0
    assert failed["run"]["error_excerpt"]
    assert read(qwen / "launch.json")["status"] == "failed"
    summary = [line.split()[:2] for line in result.stdout.splitlines() if line.startswith("mega-")]
    assert summary == [["mega-llama", "ok"], ["mega-qwen", "failed"]]
    assert json.loads((llama / "config.json").read_text())["run_id"] == "mega-llama"
