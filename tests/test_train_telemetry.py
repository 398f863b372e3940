"""Telemetry around a run: the launcher's sampler (train.launch.process), each rank's step times (train.common.step_log)
and the judge's telemetry and stragglers sections (evaluate.judge), whatever the framework."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from evaluate import judge
from tests.test_evaluate_judge import ENDED, ended_run, judged
from train.launch.command import Launch
from train.launch.process import run_supervised
from train.common.step_log import RankSteps
from utils.machine import stragglers, telemetry, telemetry_backends
from utils.spec.result import schema_errors

REPO = Path(__file__).resolve().parent.parent


def python_run(code: str) -> Launch:
    return Launch(argv=[sys.executable, "-c", code], env={}, cwd=str(REPO))


def test_the_launcher_samples_the_node_from_before_the_run_until_it_ended(tmp_path):
    started = time.time()
    outcome = run_supervised(python_run("import time; time.sleep(1.2)"), tmp_path / "train.log", "cpu", 200)
    record = telemetry.read(tmp_path / telemetry.FILE)
    assert outcome.exit_code == 0 and record.complete and record.method in ("psutil", "rapl+psutil")
    times = [s["time_s"] for s in record.samples]
    assert len(times) >= 5 and started < times[0] < started + 1 and record.end_s > started + 1.2
    assert record.end_s - times[-1] < 0.2 + 0.1  # sampled up to its stop, one interval apart


def test_a_failed_run_is_sampled_to_its_end_too(tmp_path):
    outcome = run_supervised(python_run("import time, sys; time.sleep(0.5); sys.exit(3)"), tmp_path / "train.log",
                             "cpu", 100)
    assert outcome.exit_code == 3 and telemetry.read(tmp_path / telemetry.FILE).complete


def test_a_sampler_that_dies_mid_run_leaves_the_run_going(tmp_path, monkeypatch, capsys):
    package = tmp_path / "powercap" / "intel-rapl:0"
    package.mkdir(parents=True)
    for name, value in (("name", "package-0"), ("max_energy_range_uj", "1000000"), ("energy_uj", "5")):
        (package / name).write_text(value)
    monkeypatch.setenv(telemetry_backends.POWERCAP_ENV, str(tmp_path / "powercap"))
    code = f"import os, time; time.sleep(0.6); os.remove({str(package / 'energy_uj')!r}); time.sleep(0.6)"
    outcome = run_supervised(python_run(code), tmp_path / "train.log", "cpu", 100)
    record = telemetry.read(tmp_path / telemetry.FILE)
    assert outcome.exit_code == 0 and not record.complete and "RAPL" in record.error
    assert "the telemetry sampler had stopped during the run (exit code 1)" in capsys.readouterr().err


def test_telemetry_off_samples_nothing(tmp_path):
    run_supervised(python_run("pass"), tmp_path / "train.log", "cpu", None)
    assert not (tmp_path / telemetry.FILE).exists()


@dataclass(frozen=True)
class Record:
    step: int
    step_time_s: float
    time_s: float | None = None


def test_every_rank_writes_its_own_step_times_and_the_record_gets_the_steps_end(tmp_path):
    writer = RankSteps(tmp_path, rank=5, local_rank=1)
    reduce = writer.timed(lambda step, elapsed, *rest: Record(step, elapsed))
    before = time.time()
    record = reduce(7, 0.25, "losses")
    writer.close()
    assert record.step == 7 and before <= record.time_s <= time.time()
    rank, = stragglers.read_rank_steps(stragglers.rank_files(tmp_path))
    assert (rank["rank"], rank["local_rank"], rank["steps"]) == (5, 1, {7: 0.25})


def telemetry_around(run_dir: Path, begin: float, end: float, watts: float = 640.0) -> None:
    """A node record sampling one GPU every half second from begin to end, as the launcher leaves it."""
    lines = [{"kind": "start", "time_s": begin, "host": "n0", "method": "nvml", "interval_ms": 500,
              "power_sensor": True, "note": None, "devices": [{"index": 0, "name": "NVIDIA H100 80GB HBM3"}]}]
    t = begin
    while t <= end:
        lines.append({"kind": "sample", "time_s": t, "index": 0, "power_w": watts, "sm_clock_mhz": 1980})
        t += 0.5
    lines.append({"kind": "end", "time_s": end, "samples": len(lines) - 1})
    (run_dir / telemetry.FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_the_judge_gives_a_log_extracted_run_its_telemetry_on_steps_rebuilt_from_the_runs_end(tmp_path):
    run_dir = ended_run(tmp_path, "nemo.log")  # NeMo's progress lines carry no timestamp
    end = datetime.fromisoformat(ENDED["ended_at"]).timestamp()
    telemetry_around(run_dir, end - 120, end)
    code, result = judged(run_dir)
    section = result["telemetry"]
    assert code == 0 and section["step_clock"] == "reconstructed_from_run_end" and section["complete"]
    assert section["mean_power_w"] == 640.0 and section["energy_method"] == "power_integral"
    assert section["energy_per_step_j"] > 0 and section["tokens_per_joule"] > 0
    assert schema_errors(result) == []


def test_a_run_without_its_telemetry_record_says_it_is_incomplete(tmp_path):
    _, result = judged(ended_run(tmp_path, "nemo.log"))
    assert result["telemetry"]["complete"] is False
    assert result["telemetry"]["note"].startswith("no telemetry record: ")


def test_with_telemetry_off_the_result_says_so(tmp_path):
    run_dir = ended_run(tmp_path, "nemo.log")
    config = json.loads((run_dir / "config.json").read_text())
    config["environment"]["telemetry"] = False
    (run_dir / "config.json").write_text(json.dumps(config))
    _, result = judged(run_dir)
    assert result["telemetry"]["enabled"] is False and "TELEMETRY=0" in result["telemetry"]["note"]


def test_step_ends_come_from_the_trainers_steps_file_then_the_logs_timestamps(tmp_path):
    result = {"series": {"step": [1, 2], "step_time_s": [0.5, 0.5]}}
    ended = judge.Ended.read(ended_run(tmp_path, "megatron.log", config="config-nvd.json") / "launch.json")
    run_dir = tmp_path / "set" / "nemo-llama"
    found, source = judge.step_clock(run_dir, result, ended)
    assert source == "log_timestamps" and [s.step for s in found] == [1, 2]
    (run_dir / "steps.jsonl").write_text('{"step": 1, "time_s": 100.0}\n{"step": 2, "time_s": 100.5}\n')
    found, source = judge.step_clock(run_dir, result, ended)
    assert source == "steps.jsonl" and [(s.start_s, s.end_s) for s in found] == [(99.5, 100.0), (100.0, 100.5)]


def test_a_trainer_run_names_its_slowest_rank(tmp_path):
    run_dir = ended_run(tmp_path, "nemo.log")
    for rank, seconds in enumerate((1.0, 1.0, 1.0, 1.2)):
        writer = RankSteps(run_dir, rank, rank)
        for step in range(1, 13):
            writer.timed(lambda s, e: Record(s, e))(step, seconds)
        writer.close()
    _, result = judged(run_dir)
    assert result["stragglers"]["method"] == "rank_step_time" and result["stragglers"]["slowest"]["rank"] == 3
    assert any(w.startswith("straggler: GPU 3 on ") for w in result["warnings"])
