"""Energy and cost in the comparison: energy per token per configuration, cost per million tokens at the user's
prices, the AMD vs NVIDIA decision per model, the projection to PROJECT_TOKENS, "not measured" with why, and the
prices' flags and knobs (utils/machine/energy_cost.py, evaluate/comparison/energy.py, evaluate.compare).

The fixtures (tests/fixtures/energy_results.py) run Llama 3.1 8B on 8 GPUs at 262,144 tokens per step: AMD 8 s per
step at 600 W per GPU, NVIDIA 10 s at 500 W; the figures below are worked out from those by hand.
"""

from pathlib import Path

import pytest

from evaluate import compare
from evaluate.comparison import plot as compare_plot
from evaluate.comparison import energy as energy_view
from evaluate.comparison import report
from evaluate.collect import load
from evaluate.comparison.repeats import repeats_of
from tests.fixtures import energy_results as fx
from utils.config.parse import ConfigError
from utils.machine.energy_cost import CostSettings, Projection, cost_per_million_tokens, cost_settings, energy_of, project

OLD_RESULTS = Path(__file__).parent / "fixtures" / "results"
PRICES = CostSettings(price_amd=2.0, price_nvd=3.0)
# 32,768 tokens/s on 8 GPUs at 2.0 per GPU-hour: 2 x 8 x (1e6 / 32,768) / 3600; NVIDIA 3 x 8 x (1e6 / 26,214.4) / 3600
AMD_COST, NVD_COST = 0.1356336806, 0.2543131510


def text_of(items, costs=PRICES) -> str:
    return report.report(items, repeats_of(items), None, costs=costs)


def part(text: str, heading: str) -> str:
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def table_row(section: str, first_cell: str) -> str:
    return next(line for line in section.splitlines() if line.startswith(f"| {first_cell} |"))


def test_cost_per_million_tokens_is_price_times_gpus_over_the_rate():
    assert cost_per_million_tokens(2.0, 8, 32768.0) == pytest.approx(AMD_COST)
    assert cost_per_million_tokens(3.0, 8, 26214.4) == pytest.approx(NVD_COST)


def test_the_projection_is_linear_in_the_measured_rate():
    # 1e12 tokens at 32,768 tokens/s: 30,517,578.125 s; x 8 GPUs / 3600 = 67,816.84 GPU-hours; x 2.0 = 135,633.68;
    # 1e12 / 1e6 x 40.6901 Wh = 40.6901 MWh
    p = project(1e12, 32768.0, 8, 40.6901, 2.0)
    assert p == Projection(1e12, 30517578.125, pytest.approx(67816.840278), pytest.approx(40.6901),
                           pytest.approx(135633.680556))
    assert project(1e12, 32768.0, 8).energy_mwh is None and project(1e12, 32768.0, 8).cost is None


def test_energy_per_token_per_configuration_comes_from_the_telemetry():
    energy = part(text_of([fx.amd(), fx.nvd()]), "## Energy and cost")
    # AMD: 262,144 / 38,400 J = 6.83 tokens per joule, 40.7 Wh per million tokens; NVIDIA 6.55 and 42.4
    assert table_row(energy, "AMD MI300X") == ("| AMD MI300X | Megatron | custom | 1 | 8 | 4,096 | 600 | 6.83 | 40.7 | "
                                               "counter | 0.14 |")
    assert table_row(energy, "NVIDIA H100 SXM") == ("| NVIDIA H100 SXM | Megatron | custom | 1 | 8 | 3,277 | 500 | "
                                                    "6.55 | 42.4 | counter | 0.25 |")


def test_without_prices_there_is_no_cost_and_the_report_names_the_knobs_and_flags():
    text = text_of([fx.amd(), fx.nvd()], CostSettings())
    energy = part(text, "## Energy and cost")
    assert "Cost per million tokens |" not in energy
    assert "No cost: no price given (PRICE_PER_GPU_HOUR_AMD / PRICE_PER_GPU_HOUR_NVD in config.env, or --price-amd / " \
           "--price-nvd)." in energy
    assert "| cost per million tokens (lower is better) | no price (PRICE_PER_GPU_HOUR_AMD) | no price " \
           "(PRICE_PER_GPU_HOUR_NVD) | - |" in part(text, "## Decision: AMD vs NVIDIA")


def test_a_price_for_one_vendor_only_costs_that_vendor():
    energy = part(text_of([fx.amd(), fx.nvd()], CostSettings(price_nvd=3.0)), "## Energy and cost")
    assert table_row(energy, "AMD MI300X").endswith("| no price (PRICE_PER_GPU_HOUR_AMD) |")
    assert table_row(energy, "NVIDIA H100 SXM").endswith("| 0.25 |")


def test_the_decision_puts_each_vendors_best_run_side_by_side_with_amd_over_nvidia():
    slower_amd = fx.result("amd", "prim-llama-r1", (fx.MI300X, 9.0, 650.0, "amdsmi"), framework="prim")
    decision = part(text_of([slower_amd, fx.amd(), fx.nvd()]), "## Decision: AMD vs NVIDIA")
    assert "- AMD: AMD MI300X + Megatron, TP 1 / PP 1 / DP 8 / GA 16, 8 GPUs, 1 node (1 ok)" in decision
    assert "- NVIDIA: NVIDIA H100 SXM + Megatron, TP 1 / PP 1 / DP 8 / GA 16, 8 GPUs, 1 node (1 ok)" in decision
    rows = [line for line in decision.splitlines() if line.startswith("| ") and "Figure" not in line]
    assert rows == [
        "| tokens/s/GPU (higher is better) | 4,096 | 3,277 | 1.25x |",  # 4,096 / 3,276.8
        "| tokens per joule (higher is better) | 6.83 | 6.55 | 1.04x |",  # 6.8267 / 6.5536
        "| Wh per million tokens (lower is better) | 40.7 | 42.4 | 0.96x |",  # 40.6901 / 42.3855
        "| cost per million tokens (lower is better) | 0.14 | 0.25 | 0.53x |",  # 0.13563 / 0.25431
    ]


def test_without_both_vendors_there_is_no_decision_and_the_report_says_so():
    decision = part(text_of([fx.amd()]), "## Decision: AMD vs NVIDIA")
    assert "- no model has a successful AMD and a successful NVIDIA run to decide between" in decision


def test_the_projection_section_is_labelled_linear_with_hand_computed_figures():
    text = text_of([fx.amd(), fx.nvd()], CostSettings(2.0, 3.0, 1e12))
    projection = part(text, "## Projection: 1e12 tokens (linear, from the measured runs)")
    assert "A linear projection from each measured run" in projection
    # AMD: 30,517,578 s = 353.2 days, 67,817 GPU-hours, 40.7 MWh, 135,633.68; NVIDIA: 1e12 / 26,214.4 s = 441.5 days,
    # 84,771 GPU-hours, 42.4 MWh, 254,313.15
    assert table_row(projection, "AMD MI300X") == ("| AMD MI300X | Megatron | Llama 3.1 8B | custom | 8 | 353.2 days | "
                                                   "67,817 | 40.7 | 135,633.68 |")
    assert table_row(projection, "NVIDIA H100 SXM") == ("| NVIDIA H100 SXM | Megatron | Llama 3.1 8B | custom | 8 | "
                                                        "441.5 days | 84,771 | 42.4 | 254,313.15 |")


def test_without_project_tokens_the_report_says_how_to_ask_for_a_projection():
    text = text_of([fx.amd(), fx.nvd()])
    assert "## Projection" not in text
    assert "No projection: set PROJECT_TOKENS (e.g. 1e12) or --project-tokens" in text


def test_a_run_without_a_power_sensor_is_not_measured_with_why_never_zero():
    cpu = fx.cpu_without_sensor()
    text = text_of([cpu], CostSettings(2.0, 3.0, 1e12))
    energy = part(text, "## Energy and cost")
    row = table_row(energy, "CPU")
    assert row.count("not measured") == 3 and "| 0 |" not in row
    assert "- not measured: CPU + Megatron - Llama 3.1 8B (tiny): no power sensor readable: /sys/class/powercap " \
           "has no readable RAPL energy_uj" in energy
    assert table_row(part(text, "## Projection"), "CPU").endswith("| not measured | - (no price for the CPU) |")


def test_results_without_telemetry_or_with_it_off_say_why_they_have_no_energy():
    old = load([OLD_RESULTS / "amd"])[0]
    assert energy_of(old.result).why == "no telemetry in this result (written before TPrimat sampled power)"
    off = fx.amd(telemetry_section={"enabled": False, "method": None, "interval_ms": None, "complete": True,
                                    "note": "telemetry off (TELEMETRY=0): nothing was sampled"})
    assert energy_of(off.result).why == "telemetry off (TELEMETRY=0): nothing was sampled"
    assert energy_of(off.result).tokens_per_joule is None


def test_the_fairness_section_names_the_side_that_throttled_ran_unhealthy_or_had_a_straggler():
    items = [fx.amd(health=fx.UNHEALTHY), fx.throttled_nvd(), fx.with_straggler(fx.nvd())]
    fairness = part(text_of(items), "## Fairness")
    assert ("- the NVIDIA side (nvd/mega-llama-r2) throttled during its steady state, so its figures were measured "
            "throttled: GPU 3 on node-0 throttled (sw_power_cap) for 12.0 s during steady-state steps 4-5") in fairness
    assert ("- the AMD side (amd/mega-llama-r1) ran on a node with 1 health problem(s): GPU 2 (00000000:3B:00.0): 3 "
            "uncorrectable ECC errors, expected 0") in fairness
    assert "- the NVIDIA side (nvd/mega-llama-r1) had a straggler: GPU 5 on node-0 is 9.0% slower than the median" \
        in fairness
    assert "hw_slowdown" not in fairness  # during warm-up only


def test_compare_png_gains_an_energy_row_where_energy_was_measured(tmp_path):
    items = [fx.amd(), fx.nvd(), fx.cpu_without_sensor()]
    drawn = compare_plot.plot(items, repeats_of(items), tmp_path / "compare.png", PRICES)
    assert drawn["Tokens per joule (higher is better; the devices' energy)"] == 2  # the CPU's: "not measured"
    assert drawn["Mean power per device (W)"] == 2
    assert drawn["Cost per million tokens (at the prices given)"] == 2  # no price for the CPU
    assert drawn["tokens/s/GPU (higher is better; median, min-max bars)"] == 3


def test_compare_png_without_any_energy_keeps_its_seven_panels(tmp_path):
    items = load([OLD_RESULTS / "amd"])
    drawn = compare_plot.plot(items, repeats_of(items), tmp_path / "compare.png", PRICES)
    assert len(drawn) == 7 and not any("joule" in title for title in drawn)


def test_prices_come_from_the_flag_else_the_environment_else_config_env(tmp_path):
    config = tmp_path / "config.env"
    config.write_text("PRICE_PER_GPU_HOUR_AMD=1.5\nPRICE_PER_GPU_HOUR_NVD=\nPROJECT_TOKENS=\n")
    flags = {"PRICE_PER_GPU_HOUR_NVD": "4"}
    assert cost_settings(flags, {"PRICE_PER_GPU_HOUR_NVD": "3", "PROJECT_TOKENS": "1e12"}, config) == \
        CostSettings(price_amd=1.5, price_nvd=4.0, project_tokens=1e12)
    assert cost_settings({}, {}, config) == CostSettings(price_amd=1.5)


@pytest.mark.parametrize("flags, env, says", [
    ({"PRICE_PER_GPU_HOUR_AMD": "two"}, {}, "--price-amd=two: must be empty or a number > 0"),
    ({}, {"PRICE_PER_GPU_HOUR_NVD": "-3"}, "PRICE_PER_GPU_HOUR_NVD=-3: must be empty or a number > 0"),
    ({"PROJECT_TOKENS": "a trillion"}, {}, "--project-tokens=a trillion: must be empty or a number"),
])
def test_a_bad_price_or_token_count_is_one_configuration_line(flags, env, says, tmp_path):
    with pytest.raises(ConfigError) as raised:
        cost_settings(flags, env, tmp_path / "absent.env")
    assert len(raised.value.problems) == 1 and raised.value.problems[0].startswith(says)


def test_compare_refuses_a_non_numeric_price_in_one_line_with_exit_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    code = compare.main([str(OLD_RESULTS / "amd"), "-o", str(out), "--price-amd", "two"])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert err.splitlines() == ["evaluate.compare: config error: --price-amd=two: must be empty or a number > 0, in "
                                "digits 0-9 (e.g. 3e-4), a price per GPU-hour in any currency"]


def test_compare_reads_the_prices_the_matrix_exports(tmp_path, monkeypatch, capsys):
    sets = fx.write_set(tmp_path / "sets", fx.amd(), fx.nvd())
    monkeypatch.setenv("PRICE_PER_GPU_HOUR_AMD", "2")
    monkeypatch.setenv("PRICE_PER_GPU_HOUR_NVD", "3")
    monkeypatch.setenv("PROJECT_TOKENS", "1000000000000.0")  # as utils.config env exports a float knob
    assert compare.main([*map(str, sets), "-o", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "report.md").read_text()
    assert "| cost per million tokens (lower is better) | 0.14 | 0.25 | 0.53x |" in text
    assert "## Projection: 1e12 tokens" in text
    capsys.readouterr()


def test_figures_of_a_configuration_are_medians_over_the_repeats_that_measured_energy():
    no_power = fx.amd("mega-llama-r2", telemetry_section={"enabled": False, "method": None, "interval_ms": None,
                                                          "complete": True, "note": None})
    rows = repeats_of([fx.amd(), no_power])
    fig = energy_view.figures_of(rows[0], PRICES)
    assert (fig.measured, fig.tokens_per_joule, fig.why) == (1, 6.8267, None)
    section = "\n".join(energy_view.energy_section(rows, PRICES))
    assert "| counter (1 of 2 runs) |" in table_row(section, "AMD MI300X")
