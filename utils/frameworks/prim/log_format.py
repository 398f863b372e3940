"""Primus's log: Megatron-LM's iteration line (utils/frameworks/megatron_log.py) under Primus's logger prefix or
with its device memory field, the lines only Primus prints, and effective.moe from Megatron-LM's argument dump
(megatron_log.moe: the experts and routing Primus's Megatron-LM took, as validate_args printed them)."""

from __future__ import annotations

import re

from utils.frameworks import megatron_log
from utils.frameworks.log_format import LogFormat, Step

PREFIX = re.compile(r"\[rank-\d+/\d+\]\s*\[(?:INFO|WARNING|DEBUG|ERROR)\s*\]")
HIP_MEMORY = re.compile(r"\b(?:hip|rocm) mem usage[^|]*")  # its iteration field: only ROCm has HIP
# v26.5's delayed-scaling patch says on rank 0 whether Transformer Engine reduces the FP8 amax across ranks
# (on exactly with sequence parallelism at TP > 1: utils/upstream/table.py, primus-v26.5 "delayed scaling reduce_amax").
REDUCE_AMAX = re.compile(r"\[Patch:megatron\.te\.delayed_scaling_reduce_amax\].*\bset reduce_amax=(True|False)\b")


def claims(step: Step) -> bool:
    return "mem_device_used_gib" in step.record or ("[rank-" in step.head and bool(PREFIX.search(step.head)))


def vendor(step: Step, text: str) -> tuple[str, str] | None:
    usage = HIP_MEMORY.search(text) if "mem_device_used_gib" in step.record else None
    return ("amd", usage.group(0)) if usage else None


def printed(text: str, settings: dict) -> None:
    found = REDUCE_AMAX.search(text)
    if found:
        settings["fp8_reduce_amax"] = found.group(1) == "True"


FORMAT = LogFormat(markers=("reduce_amax",), refines=megatron_log.FORMAT, claims=claims, vendor=vendor,
                   printed=printed, arguments=megatron_log.moe)
