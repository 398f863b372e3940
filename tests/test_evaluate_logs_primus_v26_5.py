"""Primus v26.5's console, as its print_rank_last patch renders Megatron-LM's iteration line.

The fixtures are what Primus release/v26.5 at ca7ddda3 prints (primus/backends/megatron/patches/training_log/
print_rank_last_patches.py: `render_training_log_line` joins the segments of Megatron-LM d3528a21's `training_log`
line, and `_forward_single_node_training_log` logs it on rank 0's console sink under primus/core/utils/logger.py's
stderr format), with the last rank's own plain print beside it when torchrun shows the last local rank
(utils/upstream/table.py: primus-v26.5 facts).
"""

from __future__ import annotations

import pytest

from evaluate.logs import parse as logs
from tests.fixtures.logs.extracting import FIXTURES, TOKENS_PER_S_PER_GPU, run_extract

RANK0 = FIXTURES / "primus_v26_5_rank0_console.log"  # what primus-cli direct shows by itself: local rank 0 only
SHOWN = FIXTURES / "primus_v26_5_last_rank_shown.log"  # local ranks 0 and 7 shown (LOCAL_RANKS, train/prim/releases.py)


def test_primus_v26_5_rank_0_console_gives_every_forwarded_step():
    parsed = logs.parse_logs([RANK0])
    assert parsed.framework == "prim"
    assert [record["step"] for record in parsed.records] == list(range(1, 13))
    assert parsed.records[0]["step_time_s"] == pytest.approx(15.0)
    assert parsed.records[0]["loss"] == pytest.approx(10.8)
    assert parsed.records[-1]["lr"] == pytest.approx(3.6e-4)


def test_primus_v26_5_compute_field_gives_its_tflops_and_average_and_the_memory_field_its_use():
    first, third = logs.parse_logs([RANK0]).records[0:3:2]
    assert first["fw_tflop_per_s_per_gpu"] == pytest.approx(560.0)  # Megatron-LM's own field before the average
    assert (third["fw_tflop_per_s_per_gpu"], third["fw_tflop_per_s_per_gpu_avg"]) == (pytest.approx(559.8),
                                                                                       pytest.approx(559.8))
    assert third["fw_tokens_per_s_per_gpu"] == pytest.approx(3523.4)
    assert first["mem_device_used_gib"] == pytest.approx(150.21)


def test_primus_v26_5_memory_as_the_last_field_counts_only_where_its_line_is_whole(tmp_path):
    whole = ("[2026-07-30 10:11:01.001000] iteration        1/      12 | elapsed time per iteration (ms): 15000.0 | "
             "global batch size:   128 | lm loss: 1.080000E+01 | "
             "hip mem usage/free/total/usage_ratio: 150.21GB/41.79GB/192.00GB/78.23%")
    log = tmp_path / "primus.log"
    log.write_text(whole + "\n" + whole.replace("1/", "2/").replace("150.21GB/41.79GB/192.00GB/78.23%", "150.2")
                   + "\n" + whole.replace("1/", "3/")[:-10])
    records = logs.parse_logs([log]).records
    assert [record.get("mem_device_used_gib") for record in records] == [pytest.approx(150.21), None, None]


def test_primus_v26_5_console_with_the_last_rank_shown_reads_each_step_once_and_the_validation_losses():
    parsed = logs.parse_logs([SHOWN])
    assert [record["step"] for record in parsed.records] == list(range(1, 13))
    assert parsed.runs_found == 1 and not parsed.warnings
    assert [(point["step"], point["loss"]) for point in parsed.validations] == [(4, pytest.approx(10.3)),
                                                                               (8, pytest.approx(9.5))]


@pytest.mark.parametrize("log", [RANK0.name, SHOWN.name])
def test_a_primus_v26_5_log_gives_the_usual_figures(tmp_path, log):
    code, result = run_extract(tmp_path, log, "config-amd.json")
    assert code == 0
    assert result["run"]["status"] == "ok"
    assert result["performance"]["step_time_s"]["median"] == pytest.approx(9.3)
    assert result["performance"]["tokens_per_s_per_gpu"] == pytest.approx(TOKENS_PER_S_PER_GPU)
    assert result["memory"]["peak_device_used_gib"] == pytest.approx(150.32)


PATCHED = ("[20260730 10:10:30][rank-0/8][INFO]     [-----delayed_scaling_patches.py:66] : "
           "[Patch:megatron.te.delayed_scaling_reduce_amax]   Patched TEDelayedScaling.__init__ to set reduce_amax={} ")


@pytest.mark.parametrize("said", [True, False])
def test_primus_v26_5_fp8_amax_reduction_is_what_its_delayed_scaling_patch_says_it_set(tmp_path, said):
    # v26.5 reduces the amax exactly with sequence parallelism at TP > 1 and logs its choice on rank 0
    log = tmp_path / "primus.log"
    log.write_text(PATCHED.format(said) + "\n" + RANK0.read_text())
    assert logs.parse_logs([log]).effective["fp8_reduce_amax"] is said
    _, result = run_extract(tmp_path, log, "config-amd.json")
    assert result["effective"]["fp8_reduce_amax"] is said and "fp8_reduce_amax" not in result["effective"].get(
        "profile_fixed", {})
