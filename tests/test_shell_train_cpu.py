"""./shell/run_train.sh on the CPU, end to end: the real launcher, trainer, extraction and comparison.

The runs are the tiny models over gloo with a handful of steps. The data stage is replaced by a stand-in that writes
the trainer tests' small prepared DATA_DIR (tests/fixtures/train/data_dir.py, its own warnings ignored: only the
product's lines are counted), then truncates Qwen's tokens and forges a manifest that matches the truncated files
(data corrupted after verification is refused before any run; a forged record is the one thing a hash cannot catch),
so that the second run of the matrix fails for real when it reads past the end of its tokens.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.fixtures.train_matrix.shell import machine, read, run_dirs
from utils import missing_stacks

# Megatron alone: the torch-native frameworks' matrix is test_train_native_launch's.
from utils.machine import telemetry
FEW_STEPS = {"TRAIN_ITERS": "4", "WARMUP_STEPS": "1", "WARMUP_SKIP": "1", "HF_HUB_OFFLINE": "1", "FRAMEWORK": "mega"}
REPO = Path(__file__).resolve().parent.parent
DATA_STAGE = f"""#!/usr/bin/env bash
set -euo pipefail
echo "data stage called" >> "${{DATA_DIR}}.calls"
PYTHONWARNINGS=ignore "{sys.executable}" -c "import sys; from pathlib import Path; sys.path.insert(0, '{REPO}')
from tests.fixtures.train.data_dir import make_data_dir
from tests.fixtures.data.verified import write_manifest
data = make_data_dir(Path('${{DATA_DIR}}'), documents=60)
qwen = data / 'sample_qwen_text_document'
Path(f'{{qwen}}.bin').write_bytes(Path(f'{{qwen}}.bin').read_bytes()[:64])
write_manifest(qwen, data / 'tokenizers' / 'qwen', 'qwen')"
"""


def test_the_cpu_default_prepares_data_runs_both_tiny_models_and_isolates_a_failing_run(tmp_path):
    fake = machine(tmp_path)
    (fake.root / "shell" / "data.sh").write_text(DATA_STAGE)
    result = fake.run("shell/run_train.sh", **FEW_STEPS)
    assert result.returncode == 1, result.output[-3000:]
    assert (tmp_path / "data.calls").read_text() == "data stage called\n"

    llama, qwen = run_dirs(tmp_path / "output")
    run_set = llama.parent
    assert qwen.parent == run_set and run_set.name.endswith("-cpu")
    first = read(llama / "result.json")
    assert first["run"]["status"] == "ok" and first["model"]["variant"] == "llama3.1-8b-tiny"
    assert first["performance"]["tokens_per_s_per_gpu"] > 0
    assert len((llama / "steps.jsonl").read_text().splitlines()) == 4
    assert "iteration        4/       4" in (llama / "train.log").read_text()
    assert_sampled(llama, first)

    second = read(qwen / "result.json")
    assert second["run"]["status"] == "failed" and second["run"]["exit_code"] != 0
    assert second["model"]["variant"] == "qwen2.5-7b-tiny" and second["run"]["error_excerpt"]
    assert read(qwen / "launch.json")["status"] == "failed"

    notices = [line for line in result.output.splitlines() if "not installed" in line]
    assert notices == [f"[tprimat] {missing_stacks.notice()}"]  # once, from the matrix, not from each worker
    assert all("not installed" not in (run / "train.log").read_text() for run in (llama, qwen))

    summary = [line.split()[:2] for line in result.stdout.splitlines() if line.startswith("mega-")]
    assert summary == [["mega-llama", "ok"], ["mega-qwen", "failed"]]
    for name in ("system.json", "compare.png", "report.md"):
        assert (run_set / name).is_file(), name


def assert_sampled(run_dir: Path, result: dict) -> None:
    """The launcher's sampler really sampled the CPU across the run's steps, on their clock, and the result says
    what it could read: package energy where RAPL is readable, else plainly that no power sensor was."""
    record = telemetry.read(run_dir / telemetry.FILE)
    ends = [read_line["time_s"] for read_line in map(json.loads, (run_dir / "steps.jsonl").read_text().splitlines())]
    times = [sample["time_s"] for sample in record.samples]
    assert record.complete and times[0] < ends[0] and times[-1] > ends[-1] - 1.0
    section = result["telemetry"]
    assert section["enabled"] and section["complete"] and section["step_clock"] == "steps.jsonl"
    assert section["method"] == record.method and section["samples"] == len(record.samples)
    if record.power_sensor:
        assert section["energy_method"] == "counter" and section["energy_per_step_j"] > 0
    else:
        assert section["note"].endswith(telemetry.read(run_dir / telemetry.FILE).note)
        assert "no power sensor readable" in section["note"] and section["energy_per_step_j"] is None
        assert section["mean_power_w"] is None and section["tokens_per_joule"] is None
