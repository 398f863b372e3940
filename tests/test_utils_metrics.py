"""utils.spec.metrics and utils.machine.hardware: the formulas, checked against values computed by hand."""

import math

import pytest

from utils.spec import metrics
from utils.machine.hardware import lookup_device, peak_tflops
from utils.spec.models import get_model


def test_summary_of_one_to_ten_matches_hand_computed_statistics():
    s = metrics.summarize(range(1, 11))
    assert (s.count, s.mean, s.median, s.min, s.max) == (10, 5.5, 5.5, 1, 10)
    # inclusive quantiles: position (n-1) x q between order statistics -> 1 + 0.9 and 9 + 0.1
    assert s.p10 == pytest.approx(1.9)
    assert s.p90 == pytest.approx(9.1)
    assert s.std == pytest.approx(math.sqrt(82.5 / 9))  # sample standard deviation


def test_summary_of_a_single_value_has_zero_spread():
    s = metrics.summarize([4.0])
    assert (s.mean, s.median, s.p10, s.p90, s.std) == (4.0, 4.0, 4.0, 4.0, 0.0)


def test_summary_refuses_empty_and_non_finite_input():
    with pytest.raises(ValueError, match="empty"):
        metrics.summarize([])
    with pytest.raises(ValueError, match="non-finite"):
        metrics.summarize([1.0, float("nan")])


def test_steady_window_skips_warmup_steps_and_steps_without_a_time():
    window = metrics.steady_window([1, 2, 3, 4, 5], [9.0, 2.0, 1.0, None, 1.1], warmup_skip=2)
    assert (window.first_step, window.last_step, window.steps) == (3, 5, [3, 5])


def test_steady_window_leaves_out_step_times_that_are_no_duration():
    window = metrics.steady_window([1, 2, 3, 4], [1.0, 0.0, -2.0, 1.1], warmup_skip=0)
    assert window.steps == [1, 4]


def test_steady_window_is_none_when_every_step_is_warmup():
    assert metrics.steady_window([1, 2], [1.0, 1.0], warmup_skip=2) is None


def test_throughput_per_gpu_and_tflops_follow_the_one_formula():
    tokens_per_s = metrics.tokens_per_second(128 * 2048, 2.0)
    assert tokens_per_s == 131072
    per_gpu = metrics.per_gpu(tokens_per_s, 8)
    assert per_gpu == 16384
    llama = get_model("llama", "full")
    # metrics.md: 46.64 GFLOP per token for Llama 3.1 8B at s = 2048
    assert metrics.tflops_per_gpu(llama, 2048, per_gpu) == pytest.approx(46.64e9 * 16384 / 1e12, rel=1e-3)


def test_mfu_is_a_fraction_of_peak_and_none_without_a_peak():
    assert metrics.mfu(494.5, 989) == pytest.approx(0.5)
    assert metrics.mfu(494.5, None) is None


@pytest.mark.parametrize("name, bf16, fp8", [
    ("NVIDIA H100 80GB HBM3", 989.4, 1978.9),
    ("NVIDIA H100 SXM5 80GB", 989.4, 1978.9),
    ("NVIDIA H100 NVL", 835, None),
    ("NVIDIA H100 PCIe", 756, None),
    ("NVIDIA H200", 989.4, 1978.9),  # the H100 SXM's silicon and clocks
    ("NVIDIA B200", 2250, 4500),
    ("AMD Instinct MI300X", 1307.4, 2614.9),
    ("AMD Instinct MI300X VF", 1307.4, 2614.9),
    ("AMD Instinct MI325X", 1307.4, 2614.9),  # the MI300X's compute units and clocks
    ("AMD Instinct MI355X", 2516.6, 5033.2),  # 256 CUs x 2400 MHz, twice the MI300X's FLOP per CU and clock
])
def test_device_table_matches_reported_names(name, bf16, fp8):
    spec = lookup_device(name)
    assert spec.bf16_tflops == bf16
    assert spec.fp8_tflops == fp8


@pytest.mark.parametrize("name", ["Tesla V100-SXM2-32GB", "AMD Instinct MI300A", "NVIDIA H200 NVL", "NVIDIA H100", None])
def test_unknown_or_ambiguous_device_has_no_peak_and_warns(name):
    with pytest.warns(UserWarning, match="MFU left empty"):
        assert peak_tflops(name, "bf16") is None


def test_missing_fp8_peak_warns_instead_of_guessing():
    with pytest.warns(UserWarning, match="no FP8 peak"):
        assert peak_tflops("NVIDIA H100 PCIe", "fp8") is None


@pytest.mark.parametrize("value, shown", [(0.0472, "0.0472"), (1.234, "1.23"), (45.64, "45.6"), (0.6, "0.6"),
                                          (386.1, "386"), (13107.4, "13,107"), (0, "0")])
def test_a_figure_shows_three_significant_digits_below_100_and_a_separated_whole_number_above(value, shown):
    assert metrics.figure_text(value) == shown
