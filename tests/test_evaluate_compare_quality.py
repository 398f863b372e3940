"""evaluate.compare on runs with held-out validation (schema 1.6 `evaluation`, `time_to_train`): the validation
panel and section, the BF16 twin check and its tolerance, UNFAIR precisions unless a precision comparison is asked
for, and the time-to-train ranking. The results are tests/fixtures/results' real NVIDIA and AMD sets with small
hand-made validation points added (every fixture checked against the schema)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evaluate import compare
from evaluate.collect import load
from evaluate.comparison import plot as compare_plot
from evaluate.comparison import quality, time_to_train
from evaluate.comparison.repeats import repeats_of
from evaluate.validate import check_result
from tests.fixtures.refigure import refigure, with_tokens_per_gpu
from utils.config.parse import ConfigError
from utils.spec.fairness import fp8_recipe, profile
from utils.spec.metrics import time_to_target
from utils.spec.result import schema_errors

RESULTS = Path(__file__).parent / "fixtures" / "results"
TOKENS_PER_STEP = 128 * 2048
EVAL_STEPS = (5, 10, 15, 20)
SPLIT = {"megatron_split": "95,5,0", "documents": 120, "fingerprint": "sha256:" + "a" * 64, "percent": 5}


def evaluation(losses, step_times, split=SPLIT, wall_scale=1.0, eval_time=2.0) -> dict:
    """Validation every 5 steps of the fixtures' 20, each evaluation eval_time seconds; the training time the run's
    step times up to each (evaluate.validate recomputes it), the wall clock wall_scale times that plus the
    evaluations."""
    train = [sum(step_times[:s]) for s in EVAL_STEPS]
    return {"interval_steps": 5, "iters": 4, "tokens": 4 * TOKENS_PER_STEP, "split": split,
            "time_s": eval_time * len(losses),
            "points": {"step": list(EVAL_STEPS), "tokens": [s * TOKENS_PER_STEP for s in EVAL_STEPS],
                       "train_time_s": train, "wall_s": [t * wall_scale + (n + 1) * eval_time
                                                         for n, t in enumerate(train)],
                       "loss": list(losses), "eval_time_s": [eval_time] * len(losses)}}


def first_points(evaluation_: dict, n: int) -> None:
    """Only the first n evaluations (a run that ended or stopped earlier), time_s theirs."""
    evaluation_["points"] = {key: values[:n] for key, values in evaluation_["points"].items()}
    evaluation_["time_s"] = sum(evaluation_["points"]["eval_time_s"])


def write(root: Path, platform: str, run: str, losses, *, name: str | None = None, target: float | None = None,
          split=SPLIT, precision: str = "bf16", speed: float = 1.0, wall_scale: float = 1.0) -> dict:
    """A copy of a fixture run with validation (and a target), in another precision and `speed` times as fast."""
    (root / platform).mkdir(parents=True, exist_ok=True)
    shutil.copy(RESULTS / platform / "system.json", root / platform / "system.json")
    data = json.loads((RESULTS / platform / run / "result.json").read_text())
    data["schema_version"] = "1.6"
    if precision != "bf16":
        recipe = fp8_recipe(profile("spec"), precision)
        data["training"].update(precision=precision, fp8_recipe=recipe)
        data["effective"].update({key: recipe[key] for key in ("fp8_amax_history_len", "fp8_amax_compute_algo",
                                                                     "fp8_reduce_amax")})
    if speed != 1.0:
        with_tokens_per_gpu(data, data["performance"]["tokens_per_s_per_gpu"] * speed)
    data["evaluation"] = evaluation(losses, data["series"]["step_time_s"], split, wall_scale=wall_scale)
    if target is not None:
        data["time_to_train"] = time_to_target(data["evaluation"]["points"], target, stopped_at_target=False,
                                               how="read from the validation series")
    data["run"]["id"] = name or run
    assert schema_errors(data) == []
    (root / platform / data["run"]["id"]).mkdir()
    (root / platform / data["run"]["id"] / "result.json").write_text(json.dumps(data))
    return data


BF16 = (8.0, 7.0, 6.5, 6.0)


def twin_set(root: Path, fp8_losses) -> list[Path]:
    """Megatron on H100 in BF16 (two repeats) and in FP8 (two repeats, 1.5x as fast), and the AMD set."""
    for r in ("r1", "r2"):
        write(root, "nvd", f"mega-llama-{r}", BF16)
        write(root, "nvd", f"mega-llama-{r}", fp8_losses, name=f"mega-llama-fp8-{r}", precision="fp8", speed=1.5)
    return [root / "nvd", RESULTS / "amd"]


def section(text: str, title: str) -> str:
    return text.split(f"## {title}")[1].split("\n## ")[0]


def test_the_validation_panel_draws_one_line_per_evaluated_run(tmp_path):
    write(tmp_path, "nvd", "mega-llama-r1", BF16)
    write(tmp_path, "nvd", "nemo-llama-r1", (8.1, 7.1, 6.6, 6.1))
    items = load([tmp_path / "nvd", RESULTS / "amd"])
    drawn = compare_plot.plot(items, repeats_of(items), tmp_path / "compare.png")
    assert drawn[quality.PANEL_TITLE] == 2


def test_results_without_validation_have_no_panel_and_no_section(tmp_path):
    items = load([RESULTS / "nvd"])
    assert quality.PANEL_TITLE not in compare_plot.plot(items, repeats_of(items), tmp_path / "compare.png")
    assert "## Validation loss" not in compare.compare([RESULTS / "nvd"], tmp_path / "out")


def test_the_validation_section_states_loss_at_equal_tokens_cadence_split_and_evaluation_time(tmp_path):
    write(tmp_path, "nvd", "mega-llama-r1", BF16)
    data = write(tmp_path, "nvd", "nemo-llama-r1", (8.2, 7.2, 6.7, 6.2))
    first_points(data["evaluation"], 3)  # its last evaluation at step 15
    (tmp_path / "nvd" / "nemo-llama-r1" / "result.json").write_text(json.dumps(data))
    text = section(compare.compare([tmp_path / "nvd"], tmp_path / "out"), "Validation loss")
    assert "Evaluation time is outside the throughput" in text
    assert f"| Validation loss at {15 * TOKENS_PER_STEP:,} tokens |" in text  # the last both runs share
    mega = next(line for line in text.splitlines() if "+ Megatron" in line)
    assert f"| 6.500 | 6.000 at {20 * TOKENS_PER_STEP:,} tokens |" in mega
    assert f"every 5 steps, {4 * TOKENS_PER_STEP:,} tokens (4 batches)" in mega
    assert "5% (95,5,0), 120 documents, sha256:aaaa" in mega and mega.endswith("| 8 |")  # 4 evaluations of 2 s


def test_runs_evaluated_on_different_splits_are_unfair(tmp_path):
    write(tmp_path, "nvd", "mega-llama-r1", BF16)
    write(tmp_path, "nvd", "nemo-llama-r1", BF16, split={**SPLIT, "fingerprint": "sha256:" + "b" * 64})
    text = compare.compare([tmp_path / "nvd"], tmp_path / "out")
    assert "**UNFAIR COMPARISON**" in text and "llama: evaluation split differs" in text


def test_a_low_precision_within_the_tolerance_is_shown_with_its_gap_and_may_win(tmp_path):
    fp8 = tuple(v * 1.005 for v in BF16)  # 0.5% above BF16
    text = compare.compare(twin_set(tmp_path, fp8), tmp_path / "out",
                           quality=quality.QualitySettings(precision_comparison=True))
    twins = section(text, "Precision against its BF16 twin")
    row = next(line for line in twins.splitlines() if line.startswith("| NVIDIA H100 SXM + Megatron"))
    assert f"| fp8 (delayed) | {20 * TOKENS_PER_STEP:,} | 6.000 | 6.030 | +0.0300 | +0.50% |" in row
    assert "(1.50x) at a gap of +0.50% | within the tolerance |" in row
    assert "- NVIDIA: NVIDIA H100 SXM + Megatron, fp8 (delayed)," in section(text, "Decision: AMD vs NVIDIA")


def test_a_low_precision_beyond_the_tolerance_is_flagged_and_wins_nothing(tmp_path):
    fp8 = tuple(v * 1.03 for v in BF16)  # 3% above BF16
    text = compare.compare(twin_set(tmp_path, fp8), tmp_path / "out",
                           quality=quality.QualitySettings(precision_comparison=True))
    row = next(line for line in section(text, "Precision against its BF16 twin").splitlines()
               if line.startswith("| NVIDIA H100 SXM + Megatron"))
    assert "| +3.00% |" in row and "**FLAGGED**: its validation loss is 3.00% above BF16's, beyond the 1% tolerance" in row
    decision = section(text, "Decision: AMD vs NVIDIA")
    assert "fp8" not in decision and "- NVIDIA: NVIDIA H100 SXM + " in decision
    looser = compare.compare(twin_set(tmp_path / "b", fp8), tmp_path / "out2",
                             quality=quality.QualitySettings(tolerance=0.05, precision_comparison=True))
    assert "within the tolerance" in looser and "FLAGGED" not in looser


def test_precisions_are_unfair_unless_a_precision_comparison_is_asked_for(tmp_path, capsys):
    inputs = twin_set(tmp_path, BF16)
    plain = compare.compare(inputs, tmp_path / "plain")
    assert "**UNFAIR COMPARISON**" in plain and "llama: precision differs" in plain
    assert "Precision comparison" not in plain
    assert compare.main([*map(str, inputs), "-o", str(tmp_path / "asked"), "--precision-comparison"]) == 0
    console = capsys.readouterr().out
    asked = (tmp_path / "asked" / "report.md").read_text()
    assert asked.split("\n")[4].startswith("**Precision comparison**: asked for (--precision-comparison)")
    assert "**UNFAIR COMPARISON**" not in asked and "**Precision comparison**" in console
    assert "- note: llama: precision differs" in asked
    assert "- every compared run shares model, sequence length, steps," in asked


def test_the_tolerance_comes_from_the_flag_the_environment_or_config_env(tmp_path):
    config = tmp_path / "config.env"
    config.write_text("PRECISION_LOSS_TOLERANCE=0.02\n")
    assert quality.quality_settings({}, env={}, config_file=config).tolerance == 0.02
    assert quality.quality_settings({}, env={"PRECISION_LOSS_TOLERANCE": "0.03"}, config_file=config).tolerance == 0.03
    assert quality.quality_settings({"PRECISION_LOSS_TOLERANCE": "0.04"}, env={}, config_file=config).tolerance == 0.04
    config.write_text("PRECISION_LOSS_TOLERANCE=\n")
    assert quality.quality_settings({}, env={}, config_file=config).tolerance == 0.01
    with pytest.raises(ConfigError):
        quality.quality_settings({"PRECISION_LOSS_TOLERANCE": "2"}, env={}, config_file=config)


def test_a_bad_tolerance_flag_is_one_line_and_exit_2(tmp_path, capsys):
    assert compare.main([str(RESULTS / "nvd"), "-o", str(tmp_path), "--precision-loss-tolerance", "lots"]) == 2
    assert "--precision-loss-tolerance=lots" in capsys.readouterr().err
    assert not (tmp_path / "report.md").exists()


def test_time_to_train_ranks_reached_runs_by_their_statistic_and_lists_the_others(tmp_path):
    reach = (8.0, 6.0, 5.0, 4.5)
    for r in ("r1", "r2"):  # Megatron reaches 5.0 at step 15
        write(tmp_path, "nvd", f"mega-llama-{r}", reach, target=5.0, wall_scale=1.0 if r == "r1" else 1.2)
    write(tmp_path, "nvd", "nemo-llama-r1", (8.0, 5.0, 4.8, 4.6), target=5.0)  # NeMo reaches it at step 10
    write(tmp_path, "nvd", "nemo-llama-r2", (8.0, 6.0, 5.5, 5.2), target=5.0)  # not reached
    write(tmp_path, "nvd", "mega-qwen-r1", (9.0, 8.0, 7.0, 6.5), target=5.0)  # another model: its own ranking
    text = section(compare.compare([tmp_path / "nvd"], tmp_path / "out"), "Time to train")
    assert "olympic mean" in text and "Results of different targets are not ranked together" in text
    llama = text.split("### Llama 3.1 8B, target 5")[1].split("###")[0]
    ranked = [line for line in llama.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert "+ NeMo" in ranked[0] and "| 112 | one run |" in ranked[0] and "| 1 of 2 |" in ranked[0]
    assert "+ Megatron" in ranked[1] and "| median |" in ranked[1] and "| 168-205 |" in ranked[1]
    assert "- not reached, not ranked: nvd/nemo-llama-r2" in llama and "last loss 5.200, best 5.200" in llama
    assert "### Qwen 2.5 7B, target 5" in text and "no run reached the target" in text


def test_a_run_stopped_at_its_target_passes_validate_and_is_ranked_as_stopped(tmp_path):
    data = write(tmp_path, "nvd", "mega-llama-r1", (8.0, 6.0, 5.0, 4.5), target=5.0)
    first_points(data["evaluation"], 3)
    data["time_to_train"] = time_to_target(data["evaluation"]["points"], 5.0, stopped_at_target=True,
                                           how="the trainer stopped at the first evaluation at or below the target")
    data["series"] = {key: values[:15] for key, values in data["series"].items()}
    data["run"]["steps_completed"] = 15
    refigure(data)
    (tmp_path / "nvd" / "mega-llama-r1" / "result.json").write_text(json.dumps(data))
    (item,) = load([tmp_path / "nvd"])
    assert [f for f in check_result(item) if f.fatal] == []
    text = section(compare.compare([tmp_path / "nvd"], tmp_path / "out"), "Time to train")
    assert "| 1 | NVIDIA H100 SXM + Megatron - Llama 3.1 8B | 168 | one run |" in text
    assert text.rstrip().endswith("| 1 of 1 | stopped at the target |")


def test_the_olympic_mean_drops_the_fastest_and_slowest_from_five_repeats():
    assert time_to_train.statistic([100.0, 1.0, 2.0, 3.0, 4.0]) == (3.0, "olympic mean of 5")
    assert time_to_train.statistic([1.0, 2.0, 3.0, 100.0]) == (2.5, "median")
