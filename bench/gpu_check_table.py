"""The GPU check's table (bench/gpu_check.sh): one row per run of a check's folder, read through TPrimat's gate, and
the ratios of TPrimat's Megatron runs to Megatron-LM's own pretrain_gpt.py on the same work.

    python3 -m bench.gpu_check_table OUT_DIR [-o TABLE.md]

A result that evaluate.validate fails shows its first failed check and no figure (evaluate.gate), as everywhere else.
Memory: the measured peak (allocated / reserved, GiB) beside TPrimat's predicted peak (utils/predict, the result's
prediction section, which the gate recomputes) and the prediction's error. Telemetry: mean board power, the energy per
million tokens, the lowest ratio of a GPU's median SM clock to its highest over the steps, and the throttle reasons seen
in the steady state. Health: evaluate.health's record of the node (OUT_DIR/health.json: `--json`), under the table.
Exit: 0 written; 2 no result in OUT_DIR.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from evaluate.collect import CollectError
from evaluate.gate import gated
from utils.cli import Parser, output_file
from utils.files import atomic_open

REFERENCE = "megatron-lm"  # the run directory prefix of Megatron-LM's own pretrain_gpt.py (bench/gpu_check.sh)
RATIOS = ("mega", "mbridge")  # TPrimat's runs measured against that reference
HEAD = ("| run | layers | status | tokens/s/GPU | TFLOP/s/GPU | MFU | step time p10 / p50 / p90 (s) | peak allocated / "
        "reserved (GiB) | predicted peak (GiB) | memory error | mean power (W) | Wh per 1M tokens | min median SM "
        "clock ratio | throttle reasons (steady) |")


def _number(value, digits: int = 1, percent: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value * 100:.{digits}f}%" if percent else f"{value:,.{digits}f}"


def row(name: str, item) -> tuple[str, float | None]:
    """A table row and the run's tokens/s/GPU (None where the gate refuses the result)."""
    r = item.result
    layers = (r.get("features") or {}).get("layer_spec", "-")
    if not item.ok:
        why = item.failures[0] if item.failures else item.verdict
        return f"| {name} | {layers} | {item.verdict}: {why} |" + " - |" * 11, None
    perf, memory = r["performance"], r.get("memory") or {}
    steps = perf.get("step_time_s") or {}
    prediction = r.get("prediction") or {}
    predicted = (prediction.get("memory") or {}).get("peak_gib")
    telemetry = r.get("telemetry") or {}
    reasons = sorted({event["reason"] for event in telemetry.get("throttle_events") or [] if event.get("steady")})
    cells = [name, layers, r["run"]["status"], _number(perf.get("tokens_per_s_per_gpu"), 0),
             _number(perf.get("tflop_per_s_per_gpu")), _number(perf.get("mfu"), 1, percent=True),
             " / ".join(_number(steps.get(k), 3) for k in ("p10", "median", "p90")),
             f"{_number(memory.get('peak_allocated_gib'))} / {_number(memory.get('peak_reserved_gib'))}",
             _number(predicted), _number(prediction.get("memory_error"), 1, percent=True),
             _number(telemetry.get("mean_power_w"), 0), _number(telemetry.get("wh_per_million_tokens"), 2),
             _number(telemetry.get("min_median_sm_clock_ratio"), 3), ", ".join(reasons) or "none"]
    return "| " + " | ".join(cells) + " |", perf.get("tokens_per_s_per_gpu")


def table(out_dir: Path) -> list[str]:
    """The table's lines, the ratios and the node's health findings."""
    found = gated([out_dir])
    items = sorted(found.results, key=lambda item: item.name)
    if not items:
        raise FileNotFoundError(f"no result.json under {out_dir}")
    lines, speed = [HEAD, "|" + "---|" * HEAD.count(" | ") + "---|"], {}
    for item in items:
        name = item.name.rsplit("/", 1)[-1]
        line, speed[name] = row(name, item)
        lines.append(line)
    reference = next((value for name, value in speed.items() if name.startswith(REFERENCE) and value), None)
    for framework in RATIOS:
        mine = next((value for name, value in speed.items() if name.split("-")[0] == framework and value), None)
        ratio = f"{mine / reference:.3f}" if mine and reference else "- (a run is missing or failed its checks)"
        lines.append(f"\n{framework} / pretrain_gpt.py tokens/s/GPU: {ratio}")
    health = out_dir / "health.json"
    if health.is_file():
        record = json.loads(health.read_text())
        problems, notes = record.get("problems") or [], record.get("notes") or []
        lines.append(f"\nnode health (evaluate.health, {record.get('method')}): "
                     f"{'ok' if record.get('ok') else 'PROBLEMS'}, {len(problems)} problem(s), {len(notes)} note(s)"
                     + "".join(f"\n- {p.get('line', p)}" for p in problems) + "".join(f"\n- note: {n}" for n in notes))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m bench.gpu_check_table", description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="the check's --out folder")
    parser.add_argument("-o", "--output", type=output_file, help="also write the table here")
    args = parser.parse_args(argv)
    try:
        lines = table(args.out_dir)
    except (FileNotFoundError, CollectError) as err:
        print(f"bench.gpu_check_table: {err}", file=sys.stderr)
        return 2
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.output:
        with atomic_open(args.output) as handle:
            handle.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
