"""The report side of the torch-native frameworks: each run's step time breakdown (stacked bars and a table),
frameworks side by side on the same layout with the ratio to Megatron, and the torch-native settings in the
fairness check. Results: tests/fixtures/breakdown_results.py (mega and fsdp with a breakdown, nemo without)."""

from __future__ import annotations

import copy

import pytest

from evaluate import native_settings, validate
from evaluate.comparison import breakdown as breakdown_view
from evaluate.comparison import plot as compare_plot
from evaluate.comparison import frameworks as framework_view
from evaluate.comparison import report
from evaluate.comparison import scaling
from evaluate.collect import Loaded
from evaluate.comparison.repeats import FRAMEWORK_NAMES, device_label, repeats_of
from tests.fixtures import breakdown_results as fixtures


@pytest.fixture(scope="module")
def items():
    return [fixtures.mega(), fixtures.fsdp(), fixtures.nemo()]


def test_each_runs_breakdown_is_a_stacked_bar_and_a_run_without_one_says_so(items):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    assert breakdown_view.panel(ax, items) == 2
    parts = {c.get_label(): [(p.get_x() + p.get_width() / 2, p.get_y(), p.get_height()) for p in c.patches]
             for c in ax.containers}
    assert list(parts) == ["forward", "backward", "optimizer", "other"]
    assert [x for x, _, _ in parts["forward"]] == [0, 1]  # mega and fsdp; nemo (x=2) has no bar
    assert parts["forward"][0][2] == pytest.approx(30.0) and parts["backward"][1][2] == pytest.approx(60.0)
    assert parts["backward"][0][1] == pytest.approx(30.0)  # stacked on the forward part
    tops = [sum(parts[name][x][2] for name in parts) for x in (0, 1)]
    assert tops == [pytest.approx(100.0)] * 2
    assert [(getattr(t, "xy", t.get_position())[0], t.get_text()) for t in ax.texts] == [
        (0, "2,000 ms"), (1, "2,500 ms"), (2, "no breakdown")]
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "Megatron\nLlama 3.1 8B\nTP1 PP1 DP8 GA16", "torch FSDP\nLlama 3.1 8B\nTP1 PP1 DP8 GA16",
        "NeMo\nLlama 3.1 8B\nTP1 PP1 DP8 GA16"]
    plt.close(fig)


def test_compare_png_holds_the_breakdown_panel(items, tmp_path):
    drawn = compare_plot.plot(items, repeats_of(items), tmp_path / "compare.png")
    assert drawn[breakdown_view.TITLE] == 2
    assert (tmp_path / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_breakdown_table_gives_each_part_in_ms_and_percent(items):
    lines = breakdown_view.table(items)
    assert "| Forward | Backward | Optimizer | Other | Step (ms) | Steps |" in lines[4]
    mega = next(line for line in lines if line.startswith("| nvd/mega-llama"))
    assert "| 600 (30.0%) | 1,200 (60.0%) | 100 (5.0%) | 100 (5.0%) | 2,000 | 4 |" in mega
    fsdp = next(line for line in lines if line.startswith("| nvd/fsdp-llama"))
    assert "| 700 (28.0%) | 1,500 (60.0%) | 200 (8.0%) | 100 (4.0%) | 2,500 | 4 |" in fsdp
    nemo = next(line for line in lines if line.startswith("| nvd/nemo-llama"))
    assert nemo.endswith("| no breakdown | - | - | - | - | - |")
    assert "- measured by device events around each phase: nvd/mega-llama, nvd/fsdp-llama" in lines


def with_training(item: Loaded, run_id: str, **training) -> Loaded:
    data = copy.deepcopy(item.result)
    data["training"].update(training)
    data["run"]["id"] = run_id
    return Loaded(item.where, data, item.system)


def test_runs_of_one_model_and_layout_are_one_group_with_the_ratio_to_megatron(items):
    other = with_training(fixtures.fsdp("fsdp-mbs2"), "fsdp-mbs2", mbs=2)  # another layout: a group of its own
    off = fixtures.fsdp("fsdp-eager", compile=False)  # other settings: another row of the same group
    found = framework_view.groups([*items, other, off])
    assert len(found) == 2
    rows = found[("llama3.1-8b", 1, 1, 8, 16, 1, 2048, "bf16", 8)]
    assert [(row.framework, row.settings) for row in rows] == [
        ("mega", "-"), ("fsdp", "DP fsdp, compile off, SAC off, attention sdpa"),
        ("fsdp", "DP fsdp, compile on, compile mode default, SAC off, attention sdpa"), ("nemo", "-")]
    assert [framework_view.ratio(row, rows) for row in rows] == pytest.approx([1.0, 2.0 / 2.5, 2.0 / 2.5, 2.0 / 2.2])
    assert list(framework_view.compared(found)) == [("llama3.1-8b", 1, 1, 8, 16, 1, 2048, "bf16", 8)]


def test_the_report_sets_frameworks_side_by_side_and_shows_the_breakdown(items):
    text = report.report(items, repeats_of(items), "compare.png")
    side = text.split("## Frameworks on the same layout")[1].split("\n## ")[0]
    assert "### Llama 3.1 8B: TP 1, PP 1, DP 8, GA 16, MBS 1, SL 2048, BF16, 8 GPUs" in side
    fsdp = next(line for line in side.splitlines() if "| torch FSDP |" in line)
    assert fsdp == ("| NVIDIA H100 SXM | torch FSDP | 1 | DP fsdp, compile on, compile mode default, SAC off, "
                    "attention sdpa | 13,107 | 611 | 2.5 | 0.80x | 1 ok |")
    assert "| NVIDIA H100 SXM | Megatron | 1 | - | 16,384 |" in side and "| 1.00x | 1 ok |" in side
    assert "## Step time breakdown" in text and "| no breakdown |" in text
    assert "Torch-native (fsdp, autotp, torchtitan) and Megatron: equal by construction" in text


def test_a_single_framework_has_nothing_to_set_beside_it():
    assert framework_view.section([fixtures.mega()])[-2] == "- no model and layout was run by more than one framework"


def native_warnings(items) -> list[str]:
    return [f.message for f in validate.fairness(items) if "torch-native" in f.message]


def test_torch_native_settings_that_differ_are_named_in_a_warning():
    found = [f for f in validate.fairness([fixtures.mega(), fixtures.fsdp(),
                                           fixtures.fsdp("fsdp-sac", checkpointed_layers=fixtures.SAC_1_4,
                                                         compile=False)])
             if "torch-native" in f.message]
    assert [f.fatal for f in found] == [False, False]
    assert found[0].message.startswith("llama: torch-native compile differs: compile on in nvd/fsdp-llama; "
                                       "compile off in nvd/fsdp-sac (torch.compile")
    assert found[1].message.startswith("llama: torch-native SAC differs: SAC off in nvd/fsdp-llama; SAC 1/4 in "
                                       "nvd/fsdp-sac (activation checkpointing")


def test_equal_torch_native_settings_and_other_frameworks_raise_no_warning(items):
    assert native_warnings([*items, fixtures.fsdp("fsdp-again")]) == []
    # a compile mode is no setting while compile is off
    assert native_warnings([fixtures.fsdp("a", compile=False), fixtures.fsdp("b", compile=False,
                                                                             compile_mode="max-autotune")]) == []


def test_a_torch_native_run_is_held_to_the_workload_identity_like_any_framework(items):
    assert [f for f in validate.fairness(items) if f.fatal] == []
    odd = with_training(fixtures.fsdp(), "fsdp-vocab", padded_vocab_size=128384)
    assert [f.message for f in validate.fairness([fixtures.mega(), odd]) if f.fatal] == [
        "llama: padded vocabulary differs: 128256 in nvd/mega-llama; 128384 in nvd/fsdp-vocab"]


def test_sac_is_read_from_the_checkpointed_layers():
    assert native_settings.described(fixtures.fsdp(checkpointed_layers=fixtures.SAC_1_4).result) == \
        "DP fsdp, compile on, compile mode default, SAC 1/4, attention sdpa"
    assert native_settings.described(fixtures.fsdp(checkpointed_layers=[0, 5]).result).endswith(
        "SAC layers 0,5, attention sdpa")


def test_every_request_setting_has_its_words():
    assert set(native_settings.KEYS) == set(native_settings.SETTINGS)
    assert native_settings.described(fixtures.mega().result) == "-"


def test_a_megatron_run_on_megatron_cores_local_layers_is_its_own_configuration_and_says_so(items):
    """TRANSFORMER_IMPL=local (features.layer_spec): never a repeat or a peer of a Transformer Engine run."""
    local = copy.deepcopy(fixtures.mega())
    local.result["features"]["layer_spec"] = "local"
    rows = repeats_of([fixtures.mega(), local])
    assert [row.settings for row in rows] == ["-", native_settings.LOCAL_LAYERS]
    assert "| NVIDIA H100 SXM | - | Megatron (local layers, no Transformer Engine) | custom |" in \
        "\n".join(report.results_table(rows))
    side = framework_view.section([local, fixtures.fsdp()])
    assert any(line.startswith("| NVIDIA H100 SXM | Megatron | 1 | local layers, no Transformer Engine |")
               for line in side), side
    assert native_settings.described(fixtures.result("autotp", "a", effective={}).result) == "not recorded"


def test_torch_native_runs_with_other_settings_are_two_configurations_not_repeats():
    on, off = fixtures.fsdp("fsdp-on"), fixtures.fsdp("fsdp-off", compile=False)
    rows = repeats_of([on, off, fixtures.fsdp("fsdp-on-r2")])
    assert [(row.settings, len(row.items)) for row in rows] == [
        ("DP fsdp, compile off, SAC off, attention sdpa", 1),
        ("DP fsdp, compile on, compile mode default, SAC off, attention sdpa", 2)]
    table = "\n".join(report.results_table(rows))
    assert "| NVIDIA H100 SXM | - | torch FSDP (DP fsdp, compile off, SAC off, attention sdpa) | custom |" in table
    assert compare_plot.tick_labels(rows) == [
        "H100 SXM\ntorch FSDP\nLlama\nDP fsdp, compile off,\nSAC off, attention sdpa",
        "H100 SXM\ntorch FSDP\nLlama\nDP fsdp, compile on,\ncompile mode default,\nSAC off, attention sdpa"]
    assert compare_plot.tick_labels(rows[:1]) == ["H100 SXM\ntorch FSDP\nLlama"]


def on_nodes(item: Loaded, nodes: int) -> Loaded:
    data = copy.deepcopy(item.result)
    data["parallelism"].update(nnodes=nodes, num_gpus=8 * nodes, dp=8 * nodes)
    data["run"]["id"] += f"-n{nodes}"
    return Loaded(item.where, data, item.system)


def test_scaling_keeps_torch_native_settings_apart():
    on, off = fixtures.fsdp("on"), fixtures.fsdp("off", compile=False)
    found = scaling.groups([on, on_nodes(on, 2), off, on_nodes(off, 2)], device_label)
    assert [(g.settings, [p.nodes for p in g.points]) for g in found] == [
        ("DP fsdp, compile off, SAC off, attention sdpa", [1, 2]),
        ("DP fsdp, compile on, compile mode default, SAC off, attention sdpa", [1, 2])]
    assert scaling.headlines(found, FRAMEWORK_NAMES)[0].startswith(
        "**Scaling**: Llama 3.1 8B on NVIDIA H100 SXM + torch FSDP (DP fsdp, compile off, SAC off, attention sdpa) "
        "keeps")


def test_nemo_beside_a_megatron_loop_gets_its_entrys_word_on_what_cannot_be_equal(items):
    from utils.frameworks import TABLE

    note = TABLE["nemo"].beside_megatron
    assert note in report.report(items, repeats_of(items), "compare.png")
    nemo_alone = [item for item in items if item.result["framework"] == "nemo"]
    assert note not in report.report(nemo_alone, repeats_of(nemo_alone), "compare.png")
