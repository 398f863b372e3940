"""evaluate.acceptance: the node's GEMM, memory and collective bandwidth, measured for real on the CPU (two workers
over gloo), and judged from records that stand in for the device (TPRIMAT_ACCEPTANCE_MEASURED) on the fake NVIDIA and
AMD nodes of tests/fakebin: the same code up to torch's calls, a slow GPU or link named, the matrix stopped."""

from __future__ import annotations

import json
import re
import shutil
import os
import subprocess
import sys
from pathlib import Path

import pytest

from train import matrix
from utils.machine import acceptance
from utils.machine.hardware import find_device
from utils.spec.models import get_model

REPO = Path(__file__).resolve().parents[1]
FAKEBIN = REPO / "tests" / "fakebin"
SHAPES = [(2048, 4096, 6144), (2048, 4096, 4096), (2048, 4096, 28672), (2048, 14336, 4096)]
FLOORS = acceptance.Floors(0.46, 0.38, 0.22)


def rank_record(rank: int, tflops: float = 700.0, copy_gb_s: float = 3000.0, busbw: float = 350.0,
                ranks: int = 8, device: str = "NVIDIA H100 80GB HBM3") -> dict:
    """What one worker would write on an H100 that does `tflops`, `copy_gb_s` and (the node) `busbw`."""
    shapes = [{"m": m, "k": k, "n": n, "flops": 2 * m * k * n, "seconds": 2 * m * k * n / (tflops * 1e12)}
              for m, k, n in SHAPES]
    size = 256 << 20
    collectives = [{"op": op, "bytes": size, "ranks": ranks,
                    "seconds": size * acceptance.bus_factor(op, ranks) / (busbw * 1e9)}
                   for op in acceptance.COLLECTIVES]
    return {"rank": rank, "local_rank": rank, "host": "node-a", "device": device,
            "gemm": {"bf16": {"shapes": shapes}},
            "memory": {"copy": {"bytes": 2 << 30, "seconds": (2 << 30) / (copy_gb_s * 1e9)},
                       "triad": {"bytes": 3 << 30, "seconds": (3 << 30) / (copy_gb_s * 1e9)}},
            "collectives": collectives}


def node(tmp_path: Path, **slow) -> Path:
    """Eight H100s' records; slow={"gpu": 3} makes GPU 3's GEMM slow, {"link": True} the node's collectives."""
    folder = tmp_path / "measured"
    folder.mkdir()
    for rank in range(8):
        found = rank_record(rank, tflops=300.0 if slow.get("gpu") == rank else 700.0,
                            busbw=40.0 if slow.get("link") else 350.0)
        (folder / f"rank{rank}.json").write_text(json.dumps(found))
    return folder


def command(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PATH": f"{FAKEBIN}{os.pathsep}{os.environ['PATH']}", **env}
    return subprocess.run([sys.executable, "-m", "evaluate.acceptance", *args], cwd=REPO, env=environ,
                          capture_output=True, text=True, timeout=300)


def test_bus_bandwidth_is_nccl_tests_algbw_times_its_factor():
    assert acceptance.bus_factor("all_reduce", 8) == 2 * 7 / 8
    assert {acceptance.bus_factor(op, 8) for op in ("all_gather", "reduce_scatter", "all_to_all")} == {7 / 8}
    algbw, busbw = acceptance.bandwidths("all_reduce", 10**9, 0.01, 2)
    assert (algbw, busbw) == (100.0, 100.0)
    with pytest.raises(ValueError, match="broadcast"):
        acceptance.bus_factor("broadcast", 8)


def test_the_gemm_shapes_are_the_planned_models_projections_at_mbs_x_sl():
    llama = get_model("llama")
    assert acceptance.gemm_shapes([llama, llama], 2048) == SHAPES  # QKV, out, gate+up, down; no repeats
    assert acceptance.gemm_shapes([get_model("llama", "tiny")], 256)[0] == (256, 128, 128 + 2 * 64)


def test_a_healthy_node_passes_and_each_figure_is_its_evidence_again():
    section = acceptance.judge([rank_record(r) for r in range(8)], find_device("NVIDIA H100 80GB HBM3"), FLOORS, {})
    assert section["verdict"] == "pass" and {gpu["verdict"] for gpu in section["gpus"]} == {"pass"}
    assert section["gpus"][0]["gemm"]["bf16"]["tflops"] == pytest.approx(700.0)
    assert section["collectives"][0]["busbw_gb_s"] == pytest.approx(350.0)
    assert acceptance.recompute_problems(section) == []


def test_an_edited_figure_fails_its_recomputation():
    section = acceptance.judge([rank_record(r) for r in range(2)], find_device("NVIDIA H100 80GB HBM3"), FLOORS, {})
    section["gpus"][1]["gemm"]["bf16"]["tflops"] *= 1.5
    section["collectives"][0]["busbw_gb_s"] = 999.0
    found = acceptance.recompute_problems(section)
    assert len(found) == 2 and "GPU 1 bf16 GEMM" in found[0] and "all_reduce" in found[1]


def test_a_gpu_slower_than_its_siblings_is_named_as_the_straggler_check_names_one():
    records = [rank_record(r, tflops=600.0 if r == 5 else 700.0) for r in range(8)]
    section = acceptance.judge(records, find_device("NVIDIA H100 80GB HBM3"), FLOORS, {})
    assert section["verdict"] == "warn" and section["gpus"][5]["verdict"] == "warn"
    assert acceptance.warnings(section) == [section["gpus"][5]["warnings"][0]]
    assert "GPU 5 on node-a: bf16 GEMM TFLOP/s 600 is 14.3% below its siblings' median 700" in \
        acceptance.warnings(section)[0]


def test_the_cpu_is_measured_and_never_fails():
    records = [rank_record(r, tflops=0.001, copy_gb_s=1.0, busbw=0.01, ranks=2) for r in range(2)]
    section = acceptance.judge(records, None, acceptance.Floors(1, 1, 1), {})
    assert section["verdict"] == acceptance.NO_SPEC and acceptance.problems(section) == []


@pytest.mark.parametrize("platform, gpus, device", [("nvd", {"FAKE_NVIDIA_GPUS": "8"}, "NVIDIA H100 SXM"),
                                                    ("amd", {"FAKE_AMD_GPUS": "8"}, "AMD MI300X")])
def test_nvidia_and_amd_are_judged_by_one_path_against_their_own_specification(tmp_path, platform, gpus, device):
    measured = node(tmp_path, gpu=3)
    done = command(tmp_path, "--platform", platform, "--models", "llama3.1-8b", "--tokens", "2048", "--workers", "8",
                   "--floors", "0.46,0.38,0.22", "--strict", "--json", TPRIMAT_ACCEPTANCE_MEASURED=str(measured),
                   **gpus)
    assert done.returncode == 1, done.stderr
    section = json.loads(done.stdout)
    assert section["specification"]["name"] == device and section["verdict"] == "fail"
    assert [gpu["index"] for gpu in section["gpus"] if gpu["verdict"] == "fail"] == [3]
    peak = find_device(device).bf16_tflops
    assert section["gpus"][3]["problems"] == [f"GPU 3 on node-a: bf16 GEMM 300 TFLOP/s is below 0.46 x the "
                                              f"{device}'s {peak:g} (ACCEPT_GEMM_FLOOR)"]


class NodeConfig(dict):
    """The knobs the matrix's node checks read (utils.config.Config's values), on an NVIDIA platform."""
    platform, models = "nvd", [get_model("llama")]


def fake_h100_node(tmp_path: Path, monkeypatch, **knobs) -> NodeConfig:
    """This machine as a node of eight H100s (tests/fakebin's nvidia-smi, node()'s records measured, a slow GPU or
    link as slow= says) and its configuration, as the matrix would check it."""
    slow = knobs.pop("slow", {})
    monkeypatch.setenv("PATH", f"{FAKEBIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_GPUS", "8")
    monkeypatch.setenv("TPRIMAT_ACCEPTANCE_MEASURED", str(node(tmp_path, **slow)))
    monkeypatch.setenv("TPRIMAT_PYTHON", sys.executable)
    return NodeConfig({"ACCEPTANCE": "strict", "DRY_RUN": False, "NODE_RANK": 0, "NNODES": 1,
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": 29500, "MBS": 1, "SL": 2048, "GPUS_PER_NODE": 8,
                       "ACCEPT_GEMM_FLOOR": 0.46, "ACCEPT_MEMORY_FLOOR": 0.38, "ACCEPT_BUSBW_FLOOR": 0.22, **knobs})


def test_a_slow_link_stops_the_matrix_in_one_line(tmp_path, monkeypatch, capfd):
    cfg = fake_h100_node(tmp_path, monkeypatch, slow={"link": True})
    (tmp_path / "system.json").write_text("{}")
    acceptance = next(check for check in matrix.node_checks(cfg) if check.knob == "ACCEPTANCE")
    with pytest.raises(SystemExit) as stopped:
        matrix.check_node(cfg, tmp_path, matrix.Stop(), acceptance)
    assert stopped.value.code == 2
    out = capfd.readouterr()
    assert [line for line in out.err.splitlines() if "error" in line] == [
        "[tprimat] error: ACCEPTANCE=strict: this node failed acceptance (the lines above name the GPU or "
        "collective); replace it, or ACCEPTANCE=warn to record it and go on"]
    assert "node node-a: all_reduce of 256 MiB over 8 GPUs: bus bandwidth 40 GB/s is below 0.22 x the NVIDIA H100 " \
           "SXM's 450 GB/s (ACCEPT_BUSBW_FLOOR)" in out.err
    recorded = json.loads((tmp_path / "system.json").read_text())["acceptance"]
    assert recorded["verdict"] == "fail" and len(recorded["problems"]) == 4
    cfg.update(ACCEPTANCE="warn")
    matrix.check_node(cfg, tmp_path, matrix.Stop(), acceptance)  # warn: recorded, and the matrix goes on


def test_the_cpu_stage_runs_for_real_over_gloo_and_is_recorded(tmp_path):
    system = tmp_path / "system.json"
    system.write_text(json.dumps({"host": {"name": "here"}}))
    done = command(tmp_path, "--platform", "cpu", "--models", "llama3.1-8b-tiny", "--tokens", "256", "--workers", "2",
                   "--floors", "1,1,1", "--strict", "--record", str(system))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no specification (CPU flags:" in done.stdout.splitlines()[0]
    recorded = json.loads(system.read_text())
    section = recorded["acceptance"]
    assert recorded["host"] == {"name": "here"} and section["verdict"] == acceptance.NO_SPEC
    assert [gpu["index"] for gpu in section["gpus"]] == [0, 1] and section["gpus"][0]["gemm"]["fp32"]["tflops"] > 0
    assert {(row["op"], row["ranks"]) for row in section["collectives"]} == {(op, 2) for op in acceptance.COLLECTIVES}
    assert section["not_measured"]["fp8"].startswith("the CPU has no FP8 matrix units")
    assert acceptance.recompute_problems(section) == []


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    done = command(tmp_path, "--floors", "0.5,2,0.1")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "from 0 to 1" in done.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    done = command(tmp_path, "--platform", "cpu", "--models", "llama3.1-8b-tiny", "--tokens", "1", "--workers", "2",
                   "--floors", "1,1,1", "--measured", str(empty))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "no rank<R>.json" in done.stderr


def with_acceptance(tmp_path: Path, edit=None, platform: str = "nvd") -> Path:
    """A fixture run set with an acceptance section of eight healthy GPUs of its kind in system.json and in every
    result's system, as the matrix and the judge write them; edit(section) changes the first result's copy."""
    from evaluate.acceptance import record
    run_set = tmp_path / platform
    shutil.copytree(REPO / "tests" / "fixtures" / "results" / platform, run_set)
    device = json.loads((run_set / "system.json").read_text())["gpu"]["name"]
    section = acceptance.judge([rank_record(r, device=device) for r in range(8)], find_device(device), FLOORS, {})
    section["checked_at"] = "2026-11-28T12:00:00+00:00"
    record(section, run_set / "system.json")
    for number, path in enumerate(sorted(run_set.glob("*/result.json"))):
        result = json.loads(path.read_text())
        result["system"]["acceptance"] = json.loads(json.dumps(section))
        if edit and number == 0:
            edit(result["system"]["acceptance"])
        path.write_text(json.dumps(result))
    return run_set


def test_the_report_shows_each_node_s_figures_and_each_run_beside_its_measured_ceiling(tmp_path):
    from evaluate import compare
    text = compare.compare([with_acceptance(tmp_path)], tmp_path / "out")
    assert "## Node acceptance" in text and "| 0 | 700 (989) | 3,000 | 3,000 | 3,350 | pass |" in text
    assert "| all_reduce (8 ranks) | 350 | 450 |" in text
    result = json.loads(next((tmp_path / "nvd").glob("mega-llama-r1/result.json")).read_text())
    tflops = result["performance"]["tflop_per_s_per_gpu"]
    assert f"| bf16 | {tflops:.3g} | 700 | {tflops / 700 * 100:.3g}% | 989 |" in text


def test_an_edited_acceptance_figure_fails_its_result_and_leaves_every_table(tmp_path):
    from evaluate import compare

    def forged(section):
        section["gpus"][2]["gemm"]["bf16"]["tflops"] = 950.0
    text = compare.compare([with_acceptance(tmp_path, forged)], tmp_path / "out")
    assert "acceptance evidence: acceptance: GPU 2 bf16 GEMM 950.0 TFLOP/s is not its shapes' FLOPs over their " \
           "seconds (700)" in text
    failing = [line for line in text.splitlines() if line.startswith("- FAIL") and "acceptance evidence" in line]
    assert len(failing) == 1


def test_a_verdict_that_its_figures_do_not_give_fails(tmp_path):
    from evaluate import acceptance_checks
    section = acceptance.judge([rank_record(r, tflops=300.0 if r == 1 else 700.0) for r in range(8)],
                               find_device("NVIDIA H100 80GB HBM3"), FLOORS, {})
    assert acceptance_checks.problems({"acceptance": section}) == []
    section["verdict"] = "pass"
    assert acceptance_checks.problems({"acceptance": section}) == [
        ("acceptance evidence", "acceptance: the verdict is 'pass', but the recorded figures and floors give 'fail'")]
    assert acceptance_checks.problems({"acceptance": {"gpus": "x"}})[0][1].startswith("system.acceptance is not")


def test_the_worker_times_only_the_repeats_each_between_two_synchronisations(monkeypatch):
    from utils.machine import acceptance_worker as worker
    events: list[str] = []

    class Fake:
        def sync(self):
            events.append("sync")
    clock = iter(range(100))
    monkeypatch.setattr(worker.time, "perf_counter", lambda: next(clock) * 2.0)
    seconds = worker.timed(Fake(), lambda: events.append("work"), warmup=2, repeats=3)
    assert events == ["work", "work"] + ["sync", "work", "sync"] * 3
    assert seconds == 2.0  # each timed repeat spans one tick of the fake clock


BOUND = {"step_s": 1.0, "compute_s": 0.6, "tp_s": 0.2, "dp_s": 0.1, "bubble_s": 0.1, "dp_total_s": 0.1, "note": None}


def test_the_step_time_bound_is_made_again_at_the_measured_bus_bandwidth():
    busbw = {op: 350.0 for op in acceptance.COLLECTIVES}
    slower = 450 / 350
    expected = 0.6 + 0.2 * slower + 0.1 * (0.6 + 0.2 * slower) / 0.8 + 0.1 * slower
    assert acceptance.bound_at_measured(BOUND, 450.0, busbw) == pytest.approx(expected)
    overlapped = {**BOUND, "dp_s": 0.0, "dp_total_s": 0.5}  # hidden behind 0.6 s of compute at the datasheet's links
    exposed = 0.5 * slower - 0.6  # what the slower links no longer hide
    assert acceptance.bound_at_measured(overlapped, 450.0, busbw) == pytest.approx(expected - 0.1 * slower + exposed)
    assert acceptance.bound_at_measured(BOUND, 450.0, {"all_reduce": 350.0}) is None


def test_the_report_sets_each_run_s_bound_at_the_measured_bus_bandwidth_beside_the_datasheet_s(tmp_path):
    from evaluate import compare
    run_set = with_acceptance(tmp_path)
    memory = {key: 1.0 for key in ("weights_gib", "gradients_gib", "optimizer_gib", "activations_gib", "logits_gib",
                                   "workspace_gib", "peak_gib", "device_gib")}
    for path in run_set.glob("*/result.json"):
        result = json.loads(path.read_text())
        result["prediction"] = {"device": "NVIDIA H100 SXM", "memory": {**memory, "phase": "forward-backward", "fits": True},
                                "time_bound": BOUND}
        path.write_text(json.dumps(result))
    text = compare.compare([run_set], tmp_path / "out")
    step = json.loads((run_set / "mega-llama-r1" / "result.json").read_text())["performance"]["step_time_s"]["median"]
    again = acceptance.bound_at_measured(BOUND, 450.0, {op: 350.0 for op in acceptance.COLLECTIVES})
    assert f"| nvd/mega-llama-r1 | 1,000 | 1,093 | {1000 * step:,.0f} | {step:.2f}x | {step / again:.2f}x |" in text


def test_the_amd_vs_nvidia_decision_shows_both_vendors_acceptance_figures(tmp_path):
    from evaluate import compare
    text = compare.compare([with_acceptance(tmp_path), with_acceptance(tmp_path, platform="amd")], tmp_path / "out")
    decision = text.split("## AMD vs NVIDIA")[1].split("\n## ")[0]
    for vendor, peak, rated, link in (("NVIDIA", "989", "3,350", "450"), ("AMD", "1,307", "5,300", "448")):
        assert f"measured before its runs: bf16 GEMM 700 TFLOP/s per GPU (peak {peak}), memory copy 3,000 GB/s " \
               f"(rated {rated}), all-reduce bus bandwidth 350 GB/s (GPU-to-GPU {link}); verdict pass" in decision
        assert f"- {vendor} " in decision


def test_each_precision_the_device_has_is_measured_or_said_not_measured_and_why():
    from evaluate.acceptance import precisions
    assert precisions("nvd", find_device("NVIDIA H100 80GB HBM3")) == (["bf16", "fp8"], {})
    wanted, why = precisions("nvd", find_device("NVIDIA B200"))
    assert wanted == ["bf16", "fp8"] and sorted(why) == ["mxfp4", "mxfp8", "nvfp4"]
    assert why["nvfp4"].startswith("the NVIDIA B200 has NVFP4 matrix units, but the stage measures only")
    assert precisions("nvd", find_device("NVIDIA H100 PCIe")) == (["bf16", "fp8"], {})  # no FP8 peak: not judged


def test_the_verdict_is_made_again_against_the_specification_the_section_records(monkeypatch):
    from evaluate import acceptance_checks
    section = acceptance.judge([rank_record(r) for r in range(2)], find_device("NVIDIA H100 80GB HBM3"), FLOORS, {})
    monkeypatch.setattr(acceptance, "specification", lambda spec: pytest.fail("read the device table"))
    assert acceptance_checks.problems({"acceptance": section}) == []  # a later table leaves it sound
    section["specification"]["peak_tflops"]["bf16"] = 2000.0  # 700 is below 0.46 x 2000: the recorded pass is not
    assert "give 'fail'" in acceptance_checks.problems({"acceptance": section})[0][1]


def test_text_from_the_acceptance_section_is_shown_as_text_in_report_md_its_keys_included(tmp_path):
    """A section's strings come from files: a warning, and the keys of not_measured (what was not measured), are
    escaped like every other string the report shows."""
    from evaluate import compare
    markup = "<img src=x onerror=alert(1)> | `x`"
    run_set = with_acceptance(tmp_path)
    for path in [run_set / "system.json", *run_set.glob("*/result.json")]:
        doc = json.loads(path.read_text())
        section = doc["acceptance"] if path.name == "system.json" else doc["system"]["acceptance"]
        section["not_measured"] = {markup: markup}
        section["gpus"][0]["warnings"] = [markup]
        path.write_text(json.dumps(doc))
    text = compare.compare([run_set], tmp_path / "out")
    escaped = r"\<img src=x onerror=alert(1)\> \| \`x\`"
    assert f"- not measured: {escaped}: {escaped}" in text and f"- {escaped}" in text
    assert re.search(r"(?<!\\)<img", text) is None
