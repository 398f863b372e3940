"""Megatron-LM's iteration line and memory report: the log format of every framework whose training loop is
Megatron-LM's (TPrimat's mega trainer prints the same line; Megatron-Bridge's loop is Megatron-LM's), and the line
Primus's format refines (utils/frameworks/prim/log_format.py).

Megatron-LM ends every field with " |", so text after the last "|" is no field: a line cut off, or cut short by
another rank's output ("elapsed time per iteration (ms): 9" and a line end is a piece of 9295.0). AMD's Megatron-LM
(Primus v26.5) re-renders the line without that "|" and with its device memory field last (utils/upstream/table.py:
primus-v26.5 "rendered line"), which counts only in a whole line (complete) and in its whole form.

Megatron-LM's argument dump (megatron/training/arguments.py `_print_args`, at the end of `validate_args`: one
"  name ..... value" line per argument) is read by evaluate/logs/settings.py setting by setting; the experts and their
routing it names are one setting, effective.moe (`moe`), for a format that names it as its `arguments` reader
(Primus's).
"""

from __future__ import annotations

import re
from functools import lru_cache

from utils.frameworks.log_format import (RECORD_START, LogFormat, Step, batch, count, field_key, fields,
                                         new_record, record_fields)

ITERATION = re.compile(RECORD_START + r"iteration\s+(\d+)\s*/\s*(\d+)\s*\|")
# Megatron-LM reports MiB ("memory (MB)"); Megatron-Bridge reports 10^9 bytes ("memory (GB)") under its own names of
# torch's memory_stats peaks (utils/upstream/table.py: mbridge-memory-report-names, mbridge-memory-report-units).
MEMORY_REPORT = re.compile(RECORD_START + r"\[Rank \d+\] \(after (\d+) iterations\) memory \((MB|GB)\)")
MEMORY_UNIT_GIB = {"MB": 1 / 1024.0, "GB": 1e9 / 2.0 ** 30}
# Field names (lower case, single spaces) -> what they are; names not listed are not parsed at all.
FIELDS = {"elapsed time per iteration (ms)": "step_time_ms", "learning rate": "lr", "lm loss": "loss",
          "grad norm": "grad_norm", "number of skipped iterations": "skipped", "number of nan iterations": "nan",
          "global batch size": "gbs"}
memory_kind = field_key({"max allocated": "allocated", "max reserved": "reserved",
                         "mem-max-allocated-gigabytes": "allocated", "mem-max-reserved-gigabytes": "reserved"})


@lru_cache(maxsize=512)
def _kind(raw_name: str) -> str | None:
    name = " ".join(raw_name.lower().split())
    if name in FIELDS:
        return FIELDS[name]
    if "tflop" in name:  # "throughput per GPU (TFLOP/s/GPU)", later "compute per GPU (TFLOP/s/GPU)"
        return "fw_tflops"
    if "tokens" in name and "gpu" in name:  # "tokens per GPU (tokens/s/GPU)", "tokens/s/GPU inst/harmonic mean"
        return "fw_tokens"
    if name.startswith(("hip mem usage", "rocm mem usage")):  # AMD's builds: GiB (older ones spell it "GB")
        return "device_mem"
    return None


def _whole_memory_field(segment: str) -> bool:
    """AMD's memory field with a value for each of its names and the last one a percentage ("hip mem
    usage/free/total/usage_ratio: 150.21GB/41.79GB/192.00GB/78.23%"): none of its shorter pieces is."""
    name, _, text = segment.rpartition(":")
    pieces = text.strip().split("/")
    return _kind(name) == "device_mem" and len(pieces) == name.count("/") + 1 and pieces[-1].endswith("%")


def record(step: int, rest: str, complete: bool = False) -> tuple[dict, int | None]:
    """One iteration line's fields (after "iteration N/M |") -> (record, global batch size)."""
    found, gbs = new_record(step), None
    segments = rest.split("|")
    last = segments.pop()
    for kind, numbers in fields(segments + ([last] if complete and _whole_memory_field(last) else []), _kind):
        first = numbers[0]
        average = numbers[1] if len(numbers) > 1 else None
        if kind == "step_time_ms":
            found["step_time_s"] = first / 1000.0
            if average is not None:
                found["fw_step_time_avg_s"] = average / 1000.0
        elif kind in ("lr", "loss", "grad_norm"):
            found[kind] = first
        elif kind in ("skipped", "nan"):
            found[kind] = count(first)
        elif kind == "gbs":
            gbs = batch(first)
        elif kind in ("fw_tflops", "fw_tokens"):
            key = "fw_tflop_per_s_per_gpu" if kind == "fw_tflops" else "fw_tokens_per_s_per_gpu"
            found[key] = first
            if average is not None:
                found[key + "_avg"] = average
        elif kind == "device_mem":
            found.setdefault("mem_device_used_gib", first)
    return found, gbs


def step(text: str, complete: bool) -> Step | None:
    match = ITERATION.match(text)
    if match is None:
        return None
    rest = text[match.end():]
    found, gbs = record(int(match.group(1)), rest, complete)
    return Step(found, int(match.group(2)), gbs, match.group(0), rest)


def memory(text: str, complete: bool) -> tuple[int, float, float] | None:
    """A memory report line -> (after which step, peak allocated GiB, peak reserved GiB), or None."""
    match = MEMORY_REPORT.match(text)
    if match is None:
        return None
    values = dict(record_fields(text[match.end():], complete, memory_kind))
    allocated, reserved = values.get("allocated"), values.get("reserved")
    if not (allocated and reserved):
        return None
    unit = MEMORY_UNIT_GIB[match.group(2)]
    return int(match.group(1)), allocated[0] * unit, reserved[0] * unit


# The arguments that make effective.moe, in megatron-core's TransformerConfig names (utils.spec.fairness.moe_settings'
# and mega's read-back): the same but the experts' count, which Megatron-LM's core_transformer_config_from_args hands
# from num_experts to num_moe_experts (utils/upstream/primus_facts.py: "num_experts", "v25.11 num_experts").
# The last two are no profile settings: they show that Primus's debugging router and legacy grouped GEMM are off.
MOE_ARGUMENTS = {"num_experts": "num_moe_experts", **{name: name for name in (
    "moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size", "moe_router_score_function",
    "moe_router_pre_softmax", "moe_router_load_balancing_type", "moe_aux_loss_coeff", "moe_token_dispatcher_type",
    "moe_router_dtype", "moe_expert_capacity_factor", "moe_z_loss_coeff", "moe_grouped_gemm", "moe_permute_fusion",
    "moe_shared_expert_overlap", "expert_model_parallel_size", "moe_router_force_load_balancing",
    "moe_use_legacy_grouped_gemm")}}


def moe(arguments: dict) -> dict:
    """effective.moe from an argument dump's values ({"moe": {...}}); {} where the dump names no experts (a dense
    model prints num_experts None, and a log without a dump names none)."""
    if not arguments.get("num_experts"):
        return {}
    return {"moe": {core: arguments[name] for name, core in MOE_ARGUMENTS.items() if name in arguments}}


FORMAT = LogFormat(markers=("iteration",), step=step, memory=memory)
