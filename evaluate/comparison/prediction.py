"""report.md's prediction section: each run's step-time bound and where it puts the time (compute, TP, DP, bubble,
and the rest: what the measured step spent beyond the bound) beside the measured forward/backward/optimizer
breakdown, and the measured peak memory beside the predicted one, a difference above 15% being a warning that names
both figures. Read from each result's prediction section (utils/predict/__init__.py, written by the judge)."""

from __future__ import annotations

from typing import Sequence

from evaluate.collect import Loaded
from utils.spec.metrics import figure_text
from utils.predict import memory_warning
from utils.spec.result_types import Section

# Fields of prediction.time_bound and of performance.breakdown, with their labels.
BOUND_PARTS = (("compute_s", "compute"), ("tp_s", "TP"), ("ep_s", "EP all-to-all"), ("dp_s", "DP"),
               ("bubble_s", "bubble"))
MEASURED_PARTS = (("forward_s", "fwd"), ("backward_s", "bwd"), ("optimizer_s", "opt"), ("other_s", "other"))
# The predicted memory's parts (fields of prediction.memory); buffers and temporaries: newer results only.
MEMORY_PARTS = ("weights_gib", "gradients_gib", "optimizer_gib", "activations_gib", "logits_gib", "buffers_gib",
                "temporaries_gib", "workspace_gib")


def ms(seconds: float) -> str:
    return figure_text(1000 * seconds)


def time_row(item: Loaded, found: Section) -> str:
    """One run's bound by part, the rest of the measured median step, the efficiency and the measured breakdown."""
    bound, performance = found.time_bound, item.typed.performance
    step = performance.step_time_s.median if performance.step_time_s else None
    if bound.step_s is None:
        where = bound.note or "no bound"
    else:
        where = ", ".join(f"{label} {ms(getattr(bound, key))}" for key, label in BOUND_PARTS if getattr(bound, key))
        where += f"; the rest {ms(step - bound.step_s)}" if step is not None else ""
    efficiency = f"{found.efficiency:.2f}x" if found.efficiency is not None else "-"
    measured = performance.breakdown
    parts = ", ".join(f"{label} {ms(getattr(measured, key))}" for key, label in MEASURED_PARTS) if measured else "none"
    bound_ms = ms(bound.step_s) if bound.step_s is not None else "-"
    return (f"| {item.name} | {found.device or '-'} | {bound_ms} | {ms(step) if step else '-'} | {efficiency} | "
            f"{where} | {parts} |")


def memory_row(item: Loaded, found: Section) -> str:
    mem = found.memory
    size = figure_text(mem.device_gib) if mem.device_gib else "-"
    fits = {True: "fits", False: "WILL NOT FIT", None: "-"}[mem.fits]
    parts = ", ".join(f"{key.removesuffix('_gib')} {figure_text(getattr(mem, key))}" for key in MEMORY_PARTS
                      if getattr(mem, key) is not None)
    measured = found.measured_peak_gib
    seen = f"{figure_text(measured)} ({found.measured_kind})" if measured is not None else "-"
    error = f"{100 * found.memory_error:+.0f}%" if found.memory_error is not None else "-"
    return f"| {item.name} | {figure_text(mem.peak_gib)} of {size} ({fits}) | {parts} | {seen} | {error} |"


def section(items: Sequence[Loaded]) -> list[str]:
    """The prediction section of report.md (nothing when no result carries a prediction)."""
    found = [(item, item.typed.prediction) for item in items if item.typed.prediction]
    if not found:
        return []
    out = ["## Predicted against measured", "",
           "A model, not a measurement: the step-time bound is what the device's dense peak and its links allow "
           "(utils/predict/step_time.py), so efficiency = measured median step / bound (1.00x = at the bound); the rest "
           "is the measured step beyond the bound. Times in ms.", "",
           "| Run | Device | Bound | Measured | Efficiency | Where the bound's time goes | Measured breakdown |",
           "|---|---|---|---|---|---|---|"]
    out += [time_row(item, prediction) for item, prediction in found]
    out += ["", "Memory per GPU in GiB: predicted peak and parts (utils/predict/memory.py) against the measured peak.",
            "", "| Run | Predicted peak | Predicted parts | Measured peak | Difference |", "|---|---|---|---|---|"]
    out += [memory_row(item, prediction) for item, prediction in found]
    warnings = [f"- **warning** {item.name}: {line}" for item, prediction in found
                if (line := memory_warning(prediction.as_dict()))]  # utils.predict reads the plain section
    return out + [""] + (warnings + [""] if warnings else [])
