"""compare.png's labels: legible however many runs of long names are compared (device, framework, model and
strategy per bar): no two tick labels of a panel overlap, nor two figures above its bars, and none of them, nor
the legend, runs off the picture."""

from __future__ import annotations

import itertools

import pytest
from matplotlib.text import Annotation

from evaluate.comparison import breakdown as breakdown_view
from evaluate.comparison import plot as compare_plot
from evaluate.collect import Loaded
from evaluate.comparison.repeats import repeats_of
from tests.fixtures import breakdown_results

SYSTEMS = {"nvd": breakdown_results.SYSTEM,
           "amd": {"gpu": {"name": "AMD Instinct MI300X", "count": 8, "vendor": "amd"}, "nodes": 1}}
FRAMEWORKS = ("autotp", "fsdp", "mega")
STRATEGIES = ("minimal_communication", "truly_identical")


def runs(count: int) -> list[Loaded]:
    """count configurations: DeepSpeed AutoTP, torch FSDP and Megatron on both platforms, with named strategies."""
    out = []
    for strategy, platform, framework in itertools.islice(itertools.product(STRATEGIES, SYSTEMS, FRAMEWORKS), count):
        run = breakdown_results.result(framework, f"{platform}-{framework}-{strategy}", platform=platform,
                                       breakdown=breakdown_results.FSDP_STEPS,
                                       effective=breakdown_results.FSDP_SETTINGS if framework == "fsdp" else None)
        run.result["parallelism"] = {**run.result["parallelism"], "strategy": strategy}
        out.append(Loaded(run.where, run.result, SYSTEMS[platform]))
    return out


def drawn_boxes(fig) -> dict[str, list]:
    """The extents, as drawn, of each panel's tick labels (those inside its x range) and of the figures above its
    bars, and of the picture and its legend."""
    renderer = fig.canvas.get_renderer()
    boxes = {"picture": [fig.get_window_extent(renderer)], "legend": [fig.legends[0].get_window_extent(renderer)]}
    for ax in fig.axes:
        low, high = sorted(ax.get_xlim())
        shown = [label for tick, label in zip(ax.get_xticks(), ax.get_xticklabels()) if low <= tick <= high]
        boxes[ax.get_title()] = [label.get_window_extent(renderer) for label in shown if label.get_text()]
        boxes[f"{ax.get_title()}: figures"] = [text.get_window_extent(renderer) for text in ax.texts
                                               if isinstance(text, Annotation)]
    return boxes


@pytest.mark.parametrize("count", [6, 12])
def test_no_two_bar_labels_overlap_and_none_leaves_the_picture(tmp_path, monkeypatch, count):
    drawn = []
    save = compare_plot.save_png
    monkeypatch.setattr(compare_plot, "save_png", lambda fig, path: (drawn.append(drawn_boxes(fig)), save(fig, path)))
    items = runs(count)
    compare_plot.plot(items, repeats_of(items), tmp_path / "compare.png")
    (boxes,) = drawn
    (picture,) = boxes.pop("picture")
    bars = ("tokens/s/GPU (higher is better; median, min-max bars)", "TFLOP/s/GPU (TPrimat's formula)",
            "Peak memory per GPU", breakdown_view.TITLE)
    assert [len(boxes[title]) for title in bars] == [len(boxes[f"{title}: figures"]) for title in bars] == [count] * 4
    for what, extents in boxes.items():
        assert not [(a, b) for a, b in itertools.combinations(extents, 2) if a.overlaps(b)], what
        assert all(picture.x0 <= box.x0 and box.x1 <= picture.x1 and picture.y0 <= box.y0 for box in extents), what
