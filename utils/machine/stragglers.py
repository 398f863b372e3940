"""The result's stragglers section: the slowest GPU and node of a run against the median.

Two sources, the first a run has:
- rank_step_time: each rank's own median step time over the steady window, from RUN_DIR/rank_steps/ (the
  TPrimat trainers mega, fsdp, autotp write one file per rank). A rank's step time includes its waits in
  collectives, so a slow GPU shows most in its own compute; its neighbours' times follow it partly.
- telemetry_sm_clock / telemetry_power (frameworks that log only rank 0: nemo, prim): each GPU's median SM
  clock over the window, else its mean power; a GPU clocked (or drawing) more than the threshold below the
  median computes that much slower. Utilization is recorded beside them, but a GPU's utilization counts
  kernels in flight, which waiting in a collective also keeps high, so it names no straggler alone.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from utils.cli import quoted

THRESHOLD = 0.05  # slower than the median by more than this fraction flags a straggler
RANK_STEPS_DIR = "rank_steps"  # RUN_DIR/rank_steps/rank<R>.jsonl: train/common/step_log.py's RankSteps


class RankStepsError(ValueError):
    """A rank's file holds a line of the wrong shape (named): no straggler figure can be made from it."""


def _rank_line(name: str, number: int, line: str) -> dict[str, Any] | None:
    """One line of a rank's file: its record, None for a line cut short by a kill; RankStepsError when malformed."""
    try:
        item = json.loads(line)
    except ValueError:
        return None
    except RecursionError:
        item = "nested too deep"
    problem = item if isinstance(item, str) else None
    if not isinstance(item, dict):
        problem = problem or "not a record"
    elif "step" in item:
        step, time_s = item.get("step"), item.get("step_time_s")
        if type(step) is not int or step < 0:
            problem = f"step is {quoted(repr(step), 60)}, not a step number"
        elif not (isinstance(time_s, (int, float)) and not isinstance(time_s, bool) and math.isfinite(time_s)
                  and time_s > 0):
            problem = f"step_time_s is {quoted(repr(time_s), 60)}, not a time above 0"
    elif "rank" in item and (type(item["rank"]) is not int or type(item.get("local_rank", 0)) is not int):
        problem = f"rank {quoted(repr(item['rank']), 60)} is not a rank number"
    if problem:
        raise RankStepsError(f"{name} line {number}: {problem}")
    return item


def rank_files(run_dir: Path) -> dict[str, Callable[[], str]]:
    """The run directory's rank files (RUN_DIR/rank_steps/rank<R>.jsonl): path -> its text, read when asked."""
    return {str(path): (lambda path=path: path.read_text(encoding="utf-8", errors="replace"))
            for path in sorted((run_dir / RANK_STEPS_DIR).glob("rank*.jsonl"))}


def read_rank_steps(files: Mapping[str, Callable[[], str]]) -> list[dict[str, Any]]:
    """Every rank's file (name -> its text: rank_files' from a run directory, evaluate.straggler_checks' from the
    side files of a folder or zip, so the judge and validate read them alike): [{"rank", "host", "local_rank",
    "steps": {step: step_time_s}}]; a line cut short by a kill is skipped; RankStepsError names a malformed line."""
    ranks = []
    for name in sorted(files):
        head: dict[str, Any] = {}
        steps: dict[int, float] = {}
        for number, line in enumerate(files[name]().splitlines(), 1):
            item = _rank_line(name, number, line)
            if item is None:
                continue
            if "step" in item:
                steps[item["step"]] = float(item["step_time_s"])
            else:
                head = item
        if "rank" in head:
            ranks.append({"rank": head["rank"], "host": str(head.get("host", "unknown")),
                          "local_rank": head.get("local_rank", head["rank"]), "steps": steps})
    return ranks


def steady_window(result: dict[str, Any]) -> tuple[int, int] | None:
    """The steps a result's figures are measured over (its performance.window), as the judge and validate take it."""
    window = (result.get("performance") or {}).get("window")
    return (window["first_step"], window["last_step"]) if window else None


def section(ranks: Sequence[dict[str, Any]], window: tuple[int, int] | None,
            per_gpu: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The stragglers section a run gets: from its ranks' step times over the window, else from its telemetry's
    per_gpu entries ([] with telemetry off); None where neither names two members."""
    found = from_rank_steps(ranks, window) if ranks and window else None
    return found if found is not None else from_telemetry(per_gpu)


def _slowest(members: list[dict[str, Any]], higher_is_slower: bool) -> tuple[float, dict[str, Any], float]:
    """The median value, the slowest member and how much slower it is (fraction)."""
    median = statistics.median(m["value"] for m in members)
    slowest = max(members, key=lambda m: m["value"]) if higher_is_slower else min(members, key=lambda m: m["value"])
    if median <= 0:
        return median, slowest, 0.0
    slower = slowest["value"] / median - 1 if higher_is_slower else 1 - slowest["value"] / median
    return median, slowest, slower


def _section(method: str, unit: str, members: list[dict[str, Any]], higher_is_slower: bool) -> dict[str, Any]:
    median, slowest, slower = _slowest(members, higher_is_slower)
    hosts: dict[str, list[float]] = {}
    for member in members:
        hosts.setdefault(member["host"], []).append(member["value"])
    nodes = [{"host": host, "value": statistics.fmean(values)} for host, values in hosts.items()]
    node_median, slowest_node, node_slower = _slowest(nodes, higher_is_slower)
    return {
        "method": method, "unit": unit, "threshold": THRESHOLD,
        "flagged": slower > THRESHOLD or node_slower > THRESHOLD, "median": round(median, 6),
        "members": members,
        "slowest": {"host": slowest["host"], "index": slowest["index"], "value": slowest["value"],
                    "slower_than_median": round(slower, 4),
                    **({"rank": slowest["rank"]} if "rank" in slowest else {})},
        "slowest_node": {"host": slowest_node["host"], "value": round(slowest_node["value"], 6),
                         "median": round(node_median, 6), "slower_than_median": round(node_slower, 4)},
    }


def from_rank_steps(ranks: Sequence[dict[str, Any]], window: tuple[int, int]) -> dict[str, Any] | None:
    """ranks: [{"rank", "host", "local_rank", "steps": {step: step_time_s}}]; None with fewer than two ranks in the
    window."""
    members = []
    for rank in ranks:
        times = [t for step, t in rank["steps"].items() if window[0] <= step <= window[1]]
        if times:
            members.append({"rank": rank["rank"], "host": rank["host"], "index": rank["local_rank"],
                            "value": round(statistics.median(times), 6)})
    if len(members) < 2:
        return None
    return _section("rank_step_time", "s", sorted(members, key=lambda m: m["rank"]), higher_is_slower=True)


def from_telemetry(per_gpu: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """From the telemetry section's per_gpu entries; None with fewer than two GPUs that report a clock or power."""
    for key, method, unit in (("median_sm_clock_mhz", "telemetry_sm_clock", "MHz"),
                              ("mean_power_w", "telemetry_power", "W")):
        members = [{"host": g["host"], "index": g["index"], "value": g[key],
                    **{k: g[k] for k in ("mean_util_pct", "mean_power_w", "median_sm_clock_mhz") if k in g}}
                   for g in per_gpu if key in g]
        if len(members) >= 2:
            return _section(method, unit, members, higher_is_slower=False)
    return None


def warning(section: dict[str, Any]) -> str | None:
    """The result's warning for a flagged straggler, naming the GPU (host and index) or node."""
    if not section.get("flagged"):
        return None
    gpu, node = section["slowest"], section["slowest_node"]
    if gpu["slower_than_median"] > section["threshold"]:
        return (f"straggler: GPU {gpu['index']} on {gpu['host']} is {gpu['slower_than_median']:.1%} slower than the "
                f"median ({section['method']}: {gpu['value']} {section['unit']} against {section['median']})")
    return (f"straggler: node {node['host']} is {node['slower_than_median']:.1%} slower than the median node "
            f"({section['method']}: {node['value']} {section['unit']} against {node['median']})")
