"""The acceptance section of a result's system (system.acceptance) made again from its evidence before anyone reads
it: each GPU's GEMM TFLOP/s from its shapes' FLOPs and seconds, each memory GB/s from its bytes and seconds, each
collective's algbw and busbw from its bytes, ranks and seconds (nccl-tests' definition), and each verdict from the
figures, the floors and the specification it records (utils.machine.acceptance, the stage's own
functions), so a later change of the device table leaves an older result sound.

A figure edited in result.json or system.json differs from its recomputation and fails the result (evaluate.gate):
the report sets each run's TFLOP/s beside its node's measured GEMM throughput, so a forged ceiling would mislead the
comparison it is read beside. A result without the section (ACCEPTANCE=off, a dry run, an older result) is not
checked here.
"""

from __future__ import annotations

from typing import Mapping

from utils.machine import acceptance
from utils.runset import node_sections

Problem = tuple[str, str]  # (check, message), as evaluate.integrity's
CHECK = "acceptance evidence"


def problems(system: Mapping) -> list[Problem]:
    """Each recorded section (node 0's, and each other node's in other_nodes) against its recomputation: one problem
    per node naming every figure that differs."""
    if not isinstance(system, Mapping):
        return []
    return [problem for rank, section in node_sections(system, "acceptance") if section is not None
            for problem in section_problems(f"node {rank}" if rank else None, section)]


def section_problems(node: str | None, section: Mapping) -> list[Problem]:
    """One node's section (node: None for node 0's system.acceptance, else "node N") against its recomputation."""
    prefix, where = ("", "system.acceptance") if node is None else (f"{node}: ", f"system.other_nodes' {node}")
    try:
        found = acceptance.recompute_problems(section)
        found += verdict_problems(section)
    except (KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError, IndexError) as err:
        return [(CHECK, f"{where} is not a section its figures can be made again from ({type(err).__name__}: "
                        f"{str(err)[:120]})")]
    return [(CHECK, prefix + "; ".join(found))] if found else []


def verdict_problems(section: Mapping) -> list[str]:
    """The node's verdict made again from the recorded times and floors (a failing node shown as passing, or the
    reverse, is named)."""
    ranks = [{"rank": gpu["rank"], "local_rank": gpu["index"], "host": gpu["host"], "device": gpu["device"],
              "gemm": {p: {k: v for k, v in item.items() if k != "tflops"} for p, item in gpu["gemm"].items()},
              "memory": {n: {k: v for k, v in item.items() if k != "gb_s"} for n, item in gpu["memory"].items()},
              "collectives": [{k: row[k] for k in ("op", "bytes", "ranks", "seconds")}
                              for row in section["collectives"]]} for gpu in section["gpus"]]
    again = acceptance.judge(ranks, section.get("specification"), acceptance.Floors(**section["floors"]),
                             section.get("not_measured", {}))
    return [] if again["verdict"] == section["verdict"] else [
        f"acceptance: the verdict is {section['verdict']!r}, but the recorded figures and floors give "
        f"{again['verdict']!r}"]
