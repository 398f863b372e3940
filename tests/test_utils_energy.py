"""utils.machine.energy and utils.machine.stragglers: the result's telemetry and stragglers sections from samples and steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from utils.machine import energy, stragglers
from utils.spec.result import schema_errors
from utils.machine.telemetry import Record
from tests.test_utils_result import build

TOKENS_PER_STEP = 8 * 4096


def steps(count: int = 10, seconds: float = 1.0, start: float = 1000.0) -> list[energy.Step]:
    """Steps back to back from `start`: step k ends at start + k * seconds."""
    return [energy.Step(k, start + k * seconds, seconds) for k in range(1, count + 1)]


def node(*gpus: list[dict], host: str = "n0", ended: bool = True, **fields) -> Record:
    """A node's record: one sample list per GPU, each sample {"time_s", ...}."""
    devices = [{"index": i, "name": "NVIDIA H100 80GB HBM3", "sm_clock_max_mhz": 1980} for i in range(len(gpus))]
    samples = [{"kind": "sample", "index": i, **s} for i, gpu in enumerate(gpus) for s in gpu]
    return Record(Path(host) / "telemetry.jsonl", host=host, method="nvml", interval_ms=500, power_sensor=True,
                  devices=devices, samples=samples, ended=ended, **fields)


def steady(watts: float, joules_at_0: float | None = None, clock: float = 1980, throttle=(), every: float = 0.5,
           until: float = 1012.0) -> list[dict]:
    """A GPU drawing `watts` from t=999 on, sampled every `every` s; with an energy counter from joules_at_0."""
    out, t = [], 999.0
    while t <= until:
        sample = {"time_s": t, "power_w": watts, "sm_clock_mhz": clock, "temp_gpu_c": 60, "util_gpu_pct": 98}
        if joules_at_0 is not None:
            sample["energy_j"] = joules_at_0 + watts * (t - 999.0)
        if throttle:
            sample["throttle"] = list(throttle(t))
        out.append(sample)
        t += every
    return out


def summarise(records: list[Record], window=(3, 10), run_steps=None) -> dict:
    return energy.summarise(records, run_steps or steps(), window, TOKENS_PER_STEP, 500, "steps.jsonl", None)


def test_energy_comes_from_the_counter_where_every_gpu_has_one():
    section = summarise([node(steady(500.0, 10.0), steady(300.0, 20.0))])
    # steps 3..10 span t = 1002 .. 1010: 8 s at 800 W for the node
    assert section["energy_method"] == "counter"
    assert section["energy_per_step_j"] == pytest.approx(800.0)
    assert section["tokens_per_joule"] == pytest.approx(TOKENS_PER_STEP / 800.0, rel=1e-3)
    assert section["wh_per_million_tokens"] == pytest.approx(800.0 / 3600 / TOKENS_PER_STEP * 1e6, rel=1e-3)
    assert (section["mean_power_w"], section["max_power_w"]) == (400.0, 500.0)


def test_without_a_counter_on_every_gpu_the_power_is_integrated_for_all():
    section = summarise([node(steady(500.0, 10.0), steady(300.0))])
    assert section["energy_method"] == "power_integral"
    assert section["energy_per_step_j"] == pytest.approx(800.0)


def test_the_counter_is_read_where_the_power_samples_miss_a_change():
    # power sampled at 500 W, but the counter says 600 W on average (the draw moved between samples)
    gpu = [{**s, "energy_j": 600.0 * (s["time_s"] - 999.0)} for s in steady(500.0)]
    section = summarise([node(gpu)])
    assert section["energy_method"] == "counter" and section["energy_per_step_j"] == pytest.approx(600.0)


def test_a_throttled_gpu_has_its_event_with_the_steps_it_overlapped():
    hot = steady(450.0, throttle=lambda t: ["sw_thermal"] if 1004.0 <= t < 1006.0 else [])  # steps 5 and 6
    section = summarise([node(steady(500.0), hot)])
    assert section["throttle_events"] == [{"host": "n0", "index": 1, "reason": "sw_thermal", "start_s": 1004.0,
                                           "duration_s": 2.0, "first_step": 5, "last_step": 6, "steady": True}]
    warning, = energy.throttle_warnings(section)
    assert warning == "GPU 1 on n0 throttled (sw_thermal) for 2.0 s during steady-state steps 5-6"


def test_throttling_only_during_warmup_is_recorded_but_not_steady():
    warm = steady(500.0, throttle=lambda t: ["hw_slowdown"] if t < 1001.0 else [])
    event, = summarise([node(warm)])["throttle_events"]
    assert (event["first_step"], event["last_step"], event["steady"]) == (1, 1, False)


def test_clocks_are_reported_against_the_devices_maximum():
    section = summarise([node(steady(500.0, clock=1980), steady(500.0, clock=1485))])
    slow = section["per_gpu"][1]
    assert (slow["median_sm_clock_mhz"], slow["sm_clock_max_mhz"], slow["median_sm_clock_ratio"]) == (1485, 1980, 0.75)
    assert section["min_median_sm_clock_ratio"] == 0.75 and section["max_temp_gpu_c"] == 60


def test_a_node_without_a_power_sensor_carries_no_power_figure():
    cpu = Record(Path("telemetry.jsonl"), host="laptop", method="psutil", interval_ms=1000, power_sensor=False,
                 note="no power sensor readable: ...", devices=[{"index": 0, "name": "cpu"}], ended=True,
                 samples=[{"kind": "sample", "index": 0, "time_s": 1000.0 + t, "util_gpu_pct": 90.0} for t in range(12)])
    section = summarise([cpu])
    assert section["power_sensor"] is False and section["note"] == "laptop: no power sensor readable: ..."
    assert section["energy_method"] is None and section["energy_per_step_j"] is None
    assert section["tokens_per_joule"] is None and section["mean_power_w"] is None


def test_a_sampler_that_died_makes_the_section_incomplete():
    section = summarise([node(steady(500.0), ended=False, error="NVML: NVMLError_GpuIsLost: 15")])
    assert section["complete"] is False
    assert section["note"] == "n0: the sampler stopped: NVML: NVMLError_GpuIsLost: 15"


def test_telemetry_off_says_so():
    assert energy.off_section() == {"enabled": False, "method": None, "interval_ms": None, "complete": True,
                                    "note": "telemetry off (TELEMETRY=0): nothing was sampled"}


def test_the_section_is_valid_in_a_result():
    result = build()
    result["telemetry"] = summarise([node(steady(500.0, 10.0, throttle=lambda t: ["sw_power_cap"]))])
    result["stragglers"] = stragglers.from_telemetry(summarise([node(steady(500.0), steady(500.0))])["per_gpu"])
    assert schema_errors(result) == []


def ranks(*medians: float, host: str = "n0") -> list[dict]:
    return [{"rank": r, "host": host, "local_rank": r, "steps": {k: m for k in range(1, 11)}}
            for r, m in enumerate(medians)]


def test_a_rank_more_than_5_percent_slower_than_the_median_is_flagged_by_host_and_gpu():
    section = stragglers.from_rank_steps(ranks(1.0, 1.01, 1.0, 1.08), (3, 10))
    assert section["flagged"] and section["method"] == "rank_step_time"
    assert section["slowest"] == {"host": "n0", "index": 3, "rank": 3, "value": 1.08, "slower_than_median": 0.0746}
    assert stragglers.warning(section) == ("straggler: GPU 3 on n0 is 7.5% slower than the median "
                                           "(rank_step_time: 1.08 s against 1.005)")


def test_ranks_within_5_percent_are_not_flagged():
    section = stragglers.from_rank_steps(ranks(1.0, 1.02, 1.04, 1.0), (3, 10))
    assert not section["flagged"] and stragglers.warning(section) is None


def test_the_slowest_node_is_named_against_the_median_node():
    section = stragglers.from_rank_steps(ranks(1.0, 1.0, host="a") + ranks(1.0, 1.0, host="b")
                                         + ranks(1.12, 1.12, host="c"), (3, 10))
    assert section["slowest_node"]["host"] == "c" and section["slowest_node"]["slower_than_median"] == 0.12


def test_frameworks_logging_only_rank_0_are_judged_by_each_gpus_clock():
    per_gpu = summarise([node(steady(700.0), steady(700.0), steady(690.0, clock=1700))])["per_gpu"]
    section = stragglers.from_telemetry(per_gpu)
    assert section["method"] == "telemetry_sm_clock" and section["flagged"]
    assert (section["slowest"]["index"], section["slowest"]["slower_than_median"]) == (2, 0.1414)
