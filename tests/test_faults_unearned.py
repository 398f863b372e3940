"""No figure that was not earned reaches a report (issue 33): each class the issue reproduced, a variant or two of
each, held to one line or a named failure and no figure. wrap's hidden forms: tests/test_faults_wrap_forms.py."""

from __future__ import annotations

import copy
import json
import re
import shutil
import signal
import sys
from datetime import datetime
from pathlib import Path

import pytest

from evaluate import compare, extract, health, project, validate, wrap
from utils.cli import run
from utils.config import ConfigError, load_config
from utils.machine import probe
from evaluate.gate import gated
from tests.fixtures import energy_results
from tests.fixtures.refigure import refigure
from tests.test_evaluate_judge import ENDED, ended_run, judged
from tests.test_train_telemetry import telemetry_around

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "tests" / "fixtures" / "results"
AMD_RUN = RESULTS / "amd" / "mega-llama-r1" / "result.json"
NVD_RUN = RESULTS / "nvd" / "mega-llama-r1" / "result.json"


def fixture(path: Path = AMD_RUN) -> dict:
    return json.loads(path.read_text())


def written(tmp_path: Path, result: dict, name: str = "run") -> Path:
    """The result as a run directory's result.json (JSON as any writer would put it, NaN included)."""
    path = tmp_path / "results" / name / "result.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result))
    return path


def failures(path: Path) -> list[str]:
    """What the gate says of one result file: its failed checks, or why it was left out."""
    found = gated([path])
    return [bad.problem for bad in found.rejected] + [f for item in found.results for f in item.failures]


def compared(tmp_path: Path, *inputs: Path, capsys) -> tuple[str, str]:
    """compare's report and its console (stderr) for the inputs."""
    assert compare.main([*map(str, inputs), "-o", str(tmp_path / "out")]) == 0
    return (tmp_path / "out" / "report.md").read_text(), capsys.readouterr().err


# --- 1. Throughput inflated by a series that is not one run's ---------------------------------------------------

def appended_fast_steps(result: dict) -> dict:
    """60 more records of step 20 at 0.05 s appended to every series array, the figures made from them."""
    for key, values in result["series"].items():
        result["series"][key] = values + [values[-1] if key != "step_time_s" else 0.05] * 60
    return refigure(result)


def short_step_times(result: dict) -> dict:
    result["series"]["step_time_s"] = result["series"]["step_time_s"][:10] + [0.05]
    return result


def window_over_more_steps_than_asked(result: dict) -> dict:
    result["performance"]["window"]["count"] = 400
    return result


@pytest.mark.parametrize("edit, check", [(appended_fast_steps, "series"), (short_step_times, "series"),
                                         (window_over_more_steps_than_asked, "window")])
def test_a_series_that_is_not_one_runs_fails_and_gives_no_figure(tmp_path, capsys, edit, check):
    path = written(tmp_path, edit(fixture()))
    assert any(f.startswith(f"{check}: ") for f in failures(path))
    report, _ = compared(tmp_path, path, capsys=capsys)
    row = next(line for line in report.splitlines() if line.startswith("| AMD MI300X"))
    assert row.endswith("| 1 failed |") and "| - | - | - |" in row  # no tokens/s/GPU, TFLOP/s or MFU
    assert "**FAILED** amd/mega-llama-r1: " in report


# --- 2. Numbers that are not finite, or no device's ----------------------------------------------------------

def nan_step_time(result: dict) -> dict:
    result["series"]["step_time_s"][10] = float("nan")
    return result


def huge_host_memory(result: dict) -> dict:
    result["memory"]["peak_host_rss_gib"] = 1e308
    return result


def nan_host_memory(result: dict) -> dict:
    result["memory"]["peak_host_rss_gib"] = float("nan")
    return result


def device_memory_above_capacity(result: dict) -> dict:
    result["memory"]["peak_reserved_gib"] = 900.0  # an MI300X holds 192 GiB
    return result


@pytest.mark.parametrize("edit, said", [(nan_step_time, "not finite"), (nan_host_memory, "not finite"),
                                        (huge_host_memory, "memory: above"),
                                        (device_memory_above_capacity, "memory: above AMD MI300X's 192 GiB")])
def test_a_number_that_is_not_finite_or_no_devices_fails_by_name(tmp_path, capsys, edit, said):
    path = written(tmp_path, edit(fixture()))
    assert any(said in f for f in failures(path))
    assert validate.main([str(path)]) == 1
    report, _ = compared(tmp_path, path, NVD_RUN, capsys=capsys)
    assert "nan (host)" not in report and "| nan" not in report and "0" * 300 not in report
    assert not any(line.startswith("| AMD MI300X") for line in report.splitlines()) or \
        next(line for line in report.splitlines() if line.startswith("| AMD MI300X")).endswith("| 1 failed |")


def test_infinity_written_as_1e400_is_refused_when_read(tmp_path):
    text = json.dumps(fixture()).replace('"peak_reserved_gib": 62.0', '"peak_reserved_gib": 1e400')
    path = tmp_path / "result.json"
    path.write_text(text)
    assert failures(path) == ["a number that is not finite (NaN or infinity)"]


# --- 3. Energy invented from power no device draws ------------------------------------------------------------

def with_energy(result: dict, watts: float, per_step_j: float | None = None) -> dict:
    """The NVIDIA run with a telemetry section of 8 GPUs drawing `watts` each (energy per step from it unless
    given)."""
    seconds = result["performance"]["step_time_s"]["mean"]
    per_step = 8 * watts * seconds if per_step_j is None else per_step_j
    tokens = result["performance"]["tokens_per_step"]
    result["telemetry"] = {
        "enabled": True, "method": "nvml", "interval_ms": 500, "complete": True, "note": None, "power_sensor": True,
        "samples": 100, "energy_method": "counter", "mean_power_w": watts, "max_power_w": watts,
        "energy_per_step_j": per_step, "tokens_per_joule": tokens / per_step,
        "wh_per_million_tokens": per_step / 3600 / tokens * 1e6, "step_clock": "steps.jsonl",
        "per_gpu": [{"host": "n0", "index": i, "samples": 10, "mean_power_w": watts, "max_power_w": watts}
                    for i in range(8)], "throttle_events": []}
    return result


@pytest.mark.parametrize("watts, per_step_j", [(1e-9, None), (640.0, 1e-6), (5.0, None)],
                         ids=["power 1e-9 W", "a counter that moved 1e-6 J", "below the idle floor"])
def test_energy_from_power_no_device_draws_fails_and_no_efficiency_is_shown(tmp_path, capsys, watts, per_step_j):
    path = written(tmp_path, with_energy(fixture(NVD_RUN), watts, per_step_j))
    assert any(f.startswith(("power: ", "energy: ")) for f in failures(path))
    report, _ = compared(tmp_path, path, capsys=capsys)
    assert "tokens/J" not in report.split("## Energy")[1].split("##")[0].replace("tokens/J |", "")


def test_a_plausible_energy_with_its_samples_passes(tmp_path):
    """An energy figure passes with the samples it was summarised from beside it (evaluate.telemetry_checks: without
    them it fails, tests/test_faults_telemetry_evidence.py)."""
    run_set, = energy_results.write_set(tmp_path, energy_results.nvd())
    assert failures(run_set / "mega-llama-r1" / "result.json") == []


def test_the_judge_leaves_out_telemetry_whose_power_no_device_draws(tmp_path):
    run_dir = ended_run(tmp_path, "nemo.log")
    end = datetime.fromisoformat(ENDED["ended_at"]).timestamp()
    telemetry_around(run_dir, end - 120, end, watts=1e-9)
    code, result = judged(run_dir)
    assert code == 0 and result["telemetry"]["note"].startswith("telemetry left out: ")
    assert "energy_per_step_j" not in result["telemetry"] and result["run"]["status"] == "ok"


# --- 4. A decision from a result validate fails ----------------------------------------------------------------

def impossible_speed(result: dict) -> dict:
    """Step times of 1 µs: faster than the device's peak allows."""
    return refigure(result, 1e-6 / result["performance"]["step_time_s"]["median"])


def test_a_result_that_fails_validate_is_in_no_ranking_or_decision(tmp_path, capsys):
    nvd = written(tmp_path, impossible_speed(fixture(NVD_RUN)), "nvd")
    report, console = compared(tmp_path, nvd, AMD_RUN, capsys=capsys)
    versus = report.split("## AMD vs NVIDIA")[1].split("\n## ")[0]
    assert "x** " not in versus  # no AMD/NVIDIA ratio from the failing run
    nvd_row = next(line for line in report.splitlines() if line.startswith("| NVIDIA H100 SXM"))
    assert nvd_row.endswith("| 1 failed |")
    assert "fails validate" in console and "nvd/mega-llama-r1" in console
    with pytest.raises(Exception, match="fails validate"):
        project.read(nvd)


def test_the_judge_fails_a_run_whose_log_claims_steps_faster_than_the_device(tmp_path):
    run_dir = ended_run(tmp_path, "megatron.log", config="config-nvd.json")
    log = (run_dir / "train.log").read_text()
    (run_dir / "train.log").write_text(re.sub(r"elapsed time per iteration \(ms\): [0-9.]+",
                                              "elapsed time per iteration (ms): 0.001", log))
    code, result = judged(run_dir)
    assert code == 0 and result["run"]["status"] == "failed"  # as validate and the report say: one verdict
    assert "step times: " in result["run"]["error_excerpt"]


# --- 5. Malformed side files: the judge names them and gives one verdict ---------------------------------------

SAMPLE = {"kind": "sample", "time_s": 1795687300.0, "index": 0, "power_w": 640.0}
BAD_SAMPLES = {"power as text": {**SAMPLE, "power_w": "N/A"}, "negative power": {**SAMPLE, "power_w": -5},
               "no time": {k: v for k, v in SAMPLE.items() if k != "time_s"},
               "devices as a string": {"kind": "start", "devices": "0,1"}}


@pytest.mark.parametrize("line", [json.dumps(v) for v in BAD_SAMPLES.values()]
                         + ['{"kind": "sample", "time_s": NaN, "index": 0}', "[" * 5000 + "]" * 5000],
                         ids=[*BAD_SAMPLES, "NaN time", "nested 5000 deep"])
def test_a_malformed_telemetry_line_is_named_and_its_section_left_out(tmp_path, line):
    run_dir = ended_run(tmp_path, "nemo.log")
    end = datetime.fromisoformat(ENDED["ended_at"]).timestamp()
    telemetry_around(run_dir, end - 120, end)
    with open(run_dir / "telemetry.jsonl", "a") as out:
        out.write(line + "\n")
    code, result = judged(run_dir)
    assert code == 0 and result["run"]["status"] == "ok"
    assert "telemetry.jsonl line " in result["telemetry"]["note"] and "mean_power_w" not in result["telemetry"]
    assert validate.main([str(run_dir / "result.json")]) in (0, 1)  # judged again: no crash, the same verdict


@pytest.mark.parametrize("line", ['{"step": 3, "step_time_s": "slow"}', '{"step": "x", "step_time_s": 1.0}',
                                  '{"step": 3, "step_time_s": -1}'])
def test_a_malformed_rank_file_is_named_and_the_straggler_section_left_out(tmp_path, line):
    run_dir = ended_run(tmp_path, "nemo.log")
    (run_dir / "rank_steps").mkdir()
    (run_dir / "rank_steps" / "rank1.jsonl").write_text('{"rank": 1, "local_rank": 1, "host": "n0"}\n' + line + "\n")
    code, result = judged(run_dir)
    assert code == 0 and "stragglers" not in result
    assert any(w.startswith("stragglers left out: ") and "rank1.jsonl line 2" in w for w in result["warnings"])


def test_a_trainers_account_nested_too_deep_fails_the_run_naming_why(tmp_path):
    run_dir = ended_run(tmp_path, "megatron.log", config="config-nvd.json")
    (run_dir / "trainer.json").write_text("[" * 5000 + "]" * 5000)
    code, result = judged(run_dir)
    assert code == 0 and result["run"]["status"] == "failed"
    assert result["run"]["error_excerpt"].startswith("its trainer's records make no result (ValueError: ")
    assert "nested more than 64 levels deep" in result["run"]["error_excerpt"]


# --- 6. A deeply nested or oversized JSON stops no reader ------------------------------------------------------

def test_a_deeply_nested_result_is_left_out_and_the_others_are_read(tmp_path, capsys):
    (tmp_path / "set" / "evil").mkdir(parents=True)
    (tmp_path / "set" / "evil" / "result.json").write_text("[" * 5000 + "]" * 5000)
    (tmp_path / "set" / "system.json").write_text("{" * 3000 + "}" * 3000)
    shutil.copytree(AMD_RUN.parent, tmp_path / "set" / "good")
    assert validate.main([str(tmp_path / "set")]) == 1
    out = capsys.readouterr()
    assert "evil/result.json: schema: nested more than 64 levels deep" in out.out and "Traceback" not in out.err
    report, console = compared(tmp_path, tmp_path / "set", capsys=capsys)
    assert "| 1 ok |" in report and "nested more than 64 levels deep" in console


# --- 7. Text from a file is escaped for the terminal and for Markdown ------------------------------------------

INJECTED = {"run id with escape codes": ("run", "id", "x\x1b[1A\x1b[2K\x1b[32mOK"),
            "excerpt with escape codes": ("run", "error_excerpt", "boom\x1b[1A\x1b[2K\x1b[32mOK"),
            "run id with a Markdown verdict": ("run", "id", "x\n## Verdict\n**AMD is 10x faster** "
                                                            "![t](http://evil.example/x.png)")}


@pytest.mark.parametrize("section, key, text", INJECTED.values(), ids=INJECTED.keys())
def test_text_from_a_file_reaches_no_terminal_or_report_raw(tmp_path, capsys, section, key, text):
    result = fixture()
    result[section][key] = text
    if key == "error_excerpt":
        result["run"]["status"] = "failed"
    path = written(tmp_path, result)
    validate.main([str(path)])
    report, console = compared(tmp_path, path, capsys=capsys)
    printed = capsys.readouterr()
    for out in (report, console, printed.out, printed.err):
        assert "\x1b" not in out and "![t](" not in out and "\n## Verdict" not in out and "**AMD is" not in out


# --- 8. A copy is the same run, counted once --------------------------------------------------------------------

def test_a_copied_run_and_a_run_set_reached_twice_count_once(tmp_path, capsys):
    runs = tmp_path / "set"
    shutil.copytree(RESULTS / "amd", runs)
    shutil.copytree(runs / "mega-llama-r1", runs / "mega-llama-r1.bak")
    report, console = compared(tmp_path, runs, runs / "mega-llama-r1", capsys=capsys)
    row = next(line for line in report.splitlines() if line.startswith("| AMD MI300X") and "| Megatron |" in line
               and "llama" in report)
    assert "| 2 ok |" in row  # r1 and r2, the copy and the second reach counted once
    assert console.count("counted once") == 2
    assert validate.main([str(runs)]) == 0
    assert "warn set:mega-llama-r1.bak/result.json: duplicate: the same run as set:mega-llama-r1/result.json" in \
        capsys.readouterr().out.replace(str(tmp_path) + "/", "")


# --- 10. One line, never a traceback ---------------------------------------------------------------------------

def test_a_claim_of_a_billion_steps_is_counted_not_listed(tmp_path):
    result = fixture()
    result["training"]["steps"] = 10 ** 9
    problems = failures(written(tmp_path, result))
    assert any("of the 1,000,000,000 requested steps have no record" in p for p in problems)


@pytest.mark.parametrize("content", ["[1, 2]", '"text"', "NaN", "null"])
def test_health_record_refuses_a_system_json_that_is_no_object(tmp_path, content):
    path = tmp_path / "system.json"
    path.write_text(content)
    with pytest.raises(health.UsageError, match="not a system description"):
        health.record(health.check("cpu"), path)


def test_a_hashed_cache_that_is_no_object_is_hashed_again(tmp_path):
    from utils import datafiles
    prefix = tmp_path / "sample_llama_text_document"
    for suffix in (".bin", ".idx"):
        prefix.with_name(prefix.name + suffix).write_bytes(b"x" * 10)
    for content in ("null", "[1]", '{"schema": 1, "files": [1]}'):
        datafiles.cache_path(prefix).write_text(content)
        hashes, hashed = datafiles.pair_hashes(prefix)
        assert hashed and set(hashes) == {".bin", ".idx"}


def test_a_link_loop_under_output_is_left_out_by_wrap(tmp_path, capsys):
    output = tmp_path / "output"
    shutil.copytree(RESULTS / "nvd", output / "set")
    (output / "self").symlink_to("self")
    (output / "set" / "loop").symlink_to(".")
    assert wrap.main([str(output), "--output", str(tmp_path / "output.zip")]) == 0
    assert "left out: self (symbolic link)" in capsys.readouterr().out


@pytest.mark.parametrize("tool, args", [(probe, ["-o", "{dir}"]), (extract, ["x.log", "-o", "{dir}"]),
                                        (health, ["--record", "{dir}"]), (compare, [str(NVD_RUN), "-o", "{file}"]),
                                        (validate, ["{long}"]), (compare, ["{long}", "-o", "{dir}"])],
                         ids=["probe -o DIR", "extract -o DIR", "health --record DIR", "compare -o FILE",
                              "validate a 300-byte name", "compare a 300-byte name"])
def test_a_path_that_cannot_be_written_or_read_is_one_line_and_exit_2(tmp_path, capsys, tool, args):
    names = {"dir": str(tmp_path), "file": str(NVD_RUN), "long": str(tmp_path / ("a" * 300))}
    with pytest.raises(SystemExit) as stop:
        _run(tool, [arg.format(**names) for arg in args])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def _run(tool, argv: list[str]) -> None:
    """The tool as its command runs it (utils.cli.run: one line per error), with argv; the handlers run() installs
    are given back."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    hooks = (sys.excepthook, sys.unraisablehook)
    try:
        run(lambda _: tool.main(argv), tool.__name__)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        sys.excepthook, sys.unraisablehook = hooks


def test_an_output_dir_with_a_300_byte_name_is_a_configuration_problem():
    with pytest.raises(ConfigError, match="a folder name of 300 bytes"):
        load_config(env={"OUTPUT_DIR": "/tmp/" + "a" * 300})


def test_a_write_a_rust_library_had_refused_is_the_disks_one_line(tmp_path):
    from utils.files import DiskError, writing
    with pytest.raises(DiskError, match="file-size limit"):
        with writing(tmp_path / "tokenizer", partial=tmp_path / "tokenizer.tmp"):
            raise Exception("File too large (os error 27)")  # what tokenizers' save raises


# --- 11. NaN and infinity on the command line --------------------------------------------------------------------

@pytest.mark.parametrize("args", [["--link-gbps", "nan"], ["--tokens", "nan"], ["--tokens", "inf"],
                                  ["--tokens", "1e400"], ["--link-gbps", "-inf"]])
def test_project_refuses_a_number_that_is_not_finite_in_one_line(capsys, args):
    with pytest.raises(SystemExit) as stop:
        project.main([str(NVD_RUN), "--nodes", "1,2", *args])
    assert stop.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_compare_refuses_a_link_that_is_not_finite_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        compare.main([str(RESULTS / "nvd"), "-o", str(tmp_path), "--project-nodes", "1,2", "--link-gbps", "nan"])
    assert stop.value.code == 2 and "give a finite number above 0" in capsys.readouterr().err


def test_results_are_not_changed_by_being_read(tmp_path):
    result = fixture()
    before = copy.deepcopy(result)
    gated([written(tmp_path, result)])
    assert json.loads((tmp_path / "results" / "run" / "result.json").read_text()) == before
