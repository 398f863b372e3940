"""report.md's prediction section: each run's step-time bound and where it puts the time (compute, TP, DP, bubble,
and the rest: what the measured step spent beyond the bound) beside the measured forward/backward/optimizer
breakdown, and the measured peak memory beside the predicted one, a difference above 15% being a warning that names
both figures. Read from each result's prediction section (utils/predict/__init__.py, written by the judge)."""

from __future__ import annotations

from typing import Sequence

from evaluate.collect import Loaded
from utils.spec.metrics import figure_text
from utils.predict import memory_warning

BOUND_PARTS = (("compute_s", "compute"), ("tp_s", "TP"), ("dp_s", "DP"), ("bubble_s", "bubble"))
MEASURED_PARTS = (("forward_s", "fwd"), ("backward_s", "bwd"), ("optimizer_s", "opt"), ("other_s", "other"))


def ms(seconds: float) -> str:
    return figure_text(1000 * seconds)


def time_row(item: Loaded, found: dict) -> str:
    """One run's bound by part, the rest of the measured median step, the efficiency and the measured breakdown."""
    bound = found["time_bound"]
    step = (item.result["performance"].get("step_time_s") or {}).get("median")
    if bound.get("step_s") is None:
        where = bound.get("note") or "no bound"
    else:
        where = ", ".join(f"{label} {ms(bound[key])}" for key, label in BOUND_PARTS if bound.get(key))
        where += f"; the rest {ms(step - bound['step_s'])}" if step is not None else ""
    efficiency = f"{found['efficiency']:.2f}x" if found.get("efficiency") is not None else "-"
    measured = item.result["performance"].get("breakdown")
    parts = ", ".join(f"{label} {ms(measured[key])}" for key, label in MEASURED_PARTS) if measured else "none"
    bound_ms = ms(bound["step_s"]) if bound.get("step_s") is not None else "-"
    return (f"| {item.name} | {found['device'] or '-'} | {bound_ms} | {ms(step) if step else '-'} | {efficiency} | "
            f"{where} | {parts} |")


def memory_row(item: Loaded, found: dict) -> str:
    mem = found["memory"]
    size = figure_text(mem["device_gib"]) if mem.get("device_gib") else "-"
    fits = {True: "fits", False: "WILL NOT FIT", None: "-"}[mem.get("fits")]
    parts = ", ".join(f"{key.removesuffix('_gib')} {figure_text(mem[key])}" for key in (
        "weights_gib", "gradients_gib", "optimizer_gib", "activations_gib", "logits_gib", "buffers_gib",
        "temporaries_gib", "workspace_gib") if mem.get(key) is not None)  # buffers and temporaries: newer results only
    measured = found.get("measured_peak_gib")
    seen = f"{figure_text(measured)} ({found['measured_kind']})" if measured is not None else "-"
    error = f"{100 * found['memory_error']:+.0f}%" if found.get("memory_error") is not None else "-"
    return f"| {item.name} | {figure_text(mem['peak_gib'])} of {size} ({fits}) | {parts} | {seen} | {error} |"


def section(items: Sequence[Loaded]) -> list[str]:
    """The prediction section of report.md (nothing when no result carries a prediction)."""
    found = [(item, item.result["prediction"]) for item in items if item.result.get("prediction")]
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
                if (line := memory_warning(prediction))]
    return out + [""] + (warnings + [""] if warnings else [])
