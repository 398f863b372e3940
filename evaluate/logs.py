"""Streaming parsers of Megatron-LM, Primus and NeMo training logs (../shared/reference/log-formats.md).

Lines are read one at a time, and only the current run's steps are kept, so memory does not grow
with the size of the log. A step is a line the framework printed: its record at the start of the
line, after nothing but a launcher's rank label and the framework's own prefix; the same text quoted
by a traceback is no step. Fields are found by name, never by position, and every field but the
iteration number is optional. What the parsers survive: ANSI colour codes, carriage returns and
CRLF line ends, other ranks' output interleaved or glued into a line (a value is taken only when
the whole field is a number, and a Megatron field only when its closing "|" follows), a last line
cut off (flagged as truncated), nan/inf and step times of 0 or below (kept as float nan: utils.result
turns them into flagged nulls), settings that are no number where one belongs (left out, named), and
several runs appended to one file or a run resumed from a checkpoint (split where the iteration
counter goes back or a step is printed again with other values; the last run is returned).

Besides the steps, the parsers read the settings a log prints, so that a log from elsewhere needs
no run request: Megatron-LM's and Primus's argument dump (layout, batch, steps, precision, LR
schedule, seed, architecture), the global batch size of every iteration line, the lines NeMo's and
megatron-core's own logging prints (parallel groups, micro-batch count, parameter count, the
OptimizerConfig and GPTDatasetConfig reprs), TPrimat's TPRIMAT_EFFECTIVE lines (and, in NeMo runs,
its TPRIMAT_STEP lines: the step time and peak memory), and the hardware a
log may name: a device line (nvidia-smi -L, rocm-smi, amd-smi) or the collective library's
version (NCCL +cuda, RCCL), and Primus's HIP memory fields. With NCCL_DEBUG=INFO, NCCL and RCCL
name the network each communicator uses: "IB" (RDMA, over InfiniBand or RoCE) or "Socket" (TCP).

Public: parse_logs, missing_steps, step_ranges, complete_batch, mock_data_evidence, effective_settings.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

FRAMEWORKS = ("mega", "prim", "nemo")
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?")
NUMBER = re.compile(r"^([-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf(?:inity)?))\s*(GiB|GB|MiB|MB|%)?$",
                    re.IGNORECASE)
# A record counts only where the framework printed it: at the start of a line, after nothing but a launcher's
# rank label (srun --label "7: ", torchrun --tee "[rank7]:" or "[default7]:") and the framework's own prefix
# (Megatron's timestamp, Primus's logger prefix, NeMo's logging prefix). The same text quoted by a traceback
# (an indented source line, a string, an exception message) is not a record.
RECORD_START = (r"^(?:\d+: )?(?:\[(?:rank|default)\d+\]: ?)?"
                r"(?: ?\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\]"
                r"|\[\d{8} \d\d:\d\d:\d\d\]\[rank-\d+/\d+\]\[(?:INFO|WARNING|DEBUG|ERROR)\s*\]\s*\[[^\]]*\]\s*:"
                r"|\[NeMo [IWDEC] [^\]]*\])? {0,2}")
NEMO_ITERATION = re.compile(RECORD_START + r"Training epoch (\d+), iteration (\d+)/(\d+)")
MEGATRON_ITERATION = re.compile(RECORD_START + r"iteration\s+(\d+)\s*/\s*(\d+)\s*\|")
MEMORY_REPORT = re.compile(RECORD_START + r"\[Rank \d+\] \(after (\d+) iterations\) memory \(MB\)")
PRIMUS_PREFIX = re.compile(r"\[rank-\d+/\d+\]\s*\[(?:INFO|WARNING|DEBUG|ERROR)\s*\]")
ARGUMENT = re.compile(r"(?:^|[\s:])([a-z_][a-z0-9_]*) \.{3,} (.*?)\s*$")
EFFECTIVE_MARKER = "TPRIMAT_EFFECTIVE"
STEP_MARKER = "TPRIMAT_STEP"  # train/nemo_timer.py: NeMo runs' device-synchronised step time and peak memory
STEP_LINE = re.compile(RECORD_START + STEP_MARKER + r" (.*)$")
MOCK_CLASSES = ("MockGPTDataset", "MockDataModule")
# NeMo (megatron_init): "Rank 0 has tensor model parallel group: [0, 1]"; the group's length is the size.
PARALLEL_GROUP = re.compile(r"\bRank \d+ has (data|tensor model|pipeline model|context) parallel group\s*:"
                            r"\s*\[([\d,\s]*)\]")
GROUP_FIELDS = {"data": "dp", "tensor model": "tp", "pipeline model": "pp", "context": "cp"}
MICROBATCHES = re.compile(r"setting number of microbatches to constant (\d+)")  # megatron-core, both frameworks
# Megatron-LM "(0, 0)", NeMo "(0 ,0)": the first stage's count, the whole model's where TP = PP = 1.
PARAMETERS = re.compile(r"number of parameters on \(tensor, pipeline\) model parallel rank \(0\s*,\s*0\):\s*(\d+)")
# megatron-core's "Setting up optimizer with config OptimizerConfig(lr=..., ...)" and "Building GPTDataset
# splits with sizes=... and config=GPTDatasetConfig(random_seed=..., sequence_length=..., ...)".
CONFIG_REPR = re.compile(r"\b(?:Optimizer|GPTDataset)Config\((.*)")
CONFIG_ITEM = re.compile(r"(?:^|, )(\w+)=('[^']*'|[^,()\[\]<>]*)")
# A device named by nvidia-smi -L, rocm-smi --showproductname or amd-smi static.
DEVICE_LINE = re.compile(r"\bGPU \d+: (.+?) \(UUID: |\bCard [Ss]eries:\s*(.+?)\s*$|\bMARKET_NAME:\s*(.+?)\s*$")
# The collective library's start-up line names the GPU stack: NCCL built for CUDA, or RCCL (ROCm).
GPU_STACKS = ((re.compile(r"\bNCCL version \S+\+cuda"), "nvidia"), (re.compile(r"\bRCCL version\b"), "amd"))
HIP_MEMORY = re.compile(r"\b(?:hip|rocm) mem usage[^|]*")  # Primus's iteration field: only ROCm has HIP
# NCCL's (and RCCL's) init.cc at every communicator's creation, NCCL_DEBUG=INFO: "NCCL INFO Using network IB".
COLLECTIVE_NETWORK = re.compile(r"\bNCCL INFO Using network (\S.*?)\s*$")
RDMA_NETWORKS = frozenset({"IB"})  # NCCL's built-in RDMA transport, InfiniBand and RoCE alike
# Bytes that a line must contain to be worth decoding; every other line is only counted.
MARKERS = (b"iteration", b" ...", b"Mock", EFFECTIVE_MARKER.encode(), STEP_MARKER.encode(), b"Traceback",
           b"out of memory", b"OutOfMemoryError", b"parallel group", b"microbatches", b"number of parameters", b"Config(",
           b"(UUID: GPU-", b"Card Series", b"Card series", b"MARKET_NAME", b"CCL version", b"Using network",
           b"vocab")
TAIL_LINES = 20
TAIL_BYTES = 64 << 10
BLOCK = 8 << 20
GIB = 2.0 ** 30

# Megatron's argument dump (also printed by Primus) -> result field names (parallelism/training).
ARGUMENT_FIELDS = {
    "tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp", "data_parallel_size": "dp",
    "micro_batch_size": "mbs", "global_batch_size": "gbs", "seq_length": "seq_len", "train_iters": "steps",
    "sequence_parallel": "sequence_parallel", "use_distributed_optimizer": "distributed_optimizer",
    "seed": "seed", "lr": "lr", "min_lr": "min_lr", "lr_warmup_iters": "warmup_steps",
    "lr_decay_style": "lr_decay_style", "weight_decay": "weight_decay", "adam_beta1": "beta1",
    "adam_beta2": "beta2", "clip_grad": "grad_clip", "mock_data": "mock_data", "data_path": "data_path",
    "train_data_path": "data_path", "world_size": "num_gpus", "context_parallel_size": "cp",
    "num_layers": "num_layers", "hidden_size": "hidden_size", "ffn_hidden_size": "ffn_hidden_size",
    "num_attention_heads": "num_attention_heads", "add_qkv_bias": "qkv_bias",
    # the workload conventions and the fairness profile's DDP and FP8 settings (utils/fairness.py's names)
    "init_method_std": "init_method_std", "eod_mask_loss": "eod_mask_loss", "dataloader_type": "dataloader_type",
    "padded_vocab_size": "padded_vocab_size", "check_for_nan_in_loss_and_grad": "check_for_nan_in_grad",
    "accumulate_allreduce_grads_in_fp32": "grad_reduce_in_fp32", "overlap_grad_reduce": "overlap_grad_reduce",
    "overlap_param_gather": "overlap_param_gather", "ddp_average_in_collective": "average_in_collective",
    "fp8_amax_history_len": "fp8_amax_history_len",
    "fp8_amax_compute_algo": "fp8_amax_compute_algo",
    "log_interval": "log_interval",  # Megatron prints every log_interval-th iteration only
}
# The padded vocabulary as built: Megatron-LM/Primus " > padded vocab (size: 151665) with 399 dummy tokens
# (new size: 152064)"; NeMo 2.3 "Use preset vocab_size: 152064, ..." or "Padded vocab_size: 152064, ...".
PADDED_VOCAB = re.compile(r"padded vocab \(size: \d+\) with \d+ dummy tokens \(new size: (\d+)\)"
                          r"|(?:Use preset|Padded) vocab_size: (\d+),")
# What a setting must be: sizes and counts are whole numbers above 0, the seed and the warm-up whole numbers,
# rates finite numbers >= 0. A value printed otherwise (a damaged line) is no setting: ignored, and named.
WHOLE_ABOVE_ZERO = frozenset({"tp", "pp", "dp", "cp", "ga", "mbs", "gbs", "seq_len", "steps", "num_gpus", "num_layers",
                              "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads",
                              "padded_vocab_size", "parameters", "log_interval"})
WHOLE_NUMBERS = frozenset({"seed", "warmup_steps", "fp8_amax_history_len"})
RATES = frozenset({"lr", "min_lr", "weight_decay", "beta1", "beta2", "grad_clip", "init_method_std"})
# megatron-core's config reprs use the argument names, except for the dataset's seed and length.
CONFIG_FIELDS = {**ARGUMENT_FIELDS, "random_seed": "seed", "sequence_length": "seq_len"}


@dataclass
class ParsedLog:
    """What the logs say about the last run they hold."""

    framework: str | None  # detected from the line format: mega | prim | nemo (None: no iteration line)
    records: list[dict]  # per-step records of the last run, by step (utils.result's shape, plus fw_* raw figures)
    total_steps: int | None  # the run's planned steps, from "iteration n/total"
    truncated: bool  # a line was cut off (a file did not end with a line end)
    runs_found: int  # runs appended in the logs (restarts of the iteration counter + 1)
    effective: dict  # settings read back: argument dump, TPRIMAT_EFFECTIVE lines, iteration lines
    mock_evidence: str | None  # the first line showing synthetic data, if any
    error_seen: bool  # a traceback or out-of-memory message appeared
    tail: list[str]  # the last lines of the last log (for error excerpts)
    device_name: str | None  # the accelerator a device line names (nvidia-smi -L, rocm-smi, amd-smi)
    gpu_vendor: str | None  # "nvidia" | "amd" as the GPU stack shows it (NCCL +cuda, RCCL, HIP memory fields)
    vendor_evidence: str | None  # the line that showed gpu_vendor
    warnings: list[str] = field(default_factory=list)
    lines_read: int = 0


@dataclass
class _Run:
    """State of one run inside the log stream."""

    start_line: int
    records: dict[int, dict] = field(default_factory=dict)
    last_step: dict[str, int] = field(default_factory=dict)  # the last step each kind of record line printed
    printed_lines: dict[tuple[int, str], str] = field(default_factory=dict)  # (step, kind) -> the text it printed
    total: int | None = None
    framework: str | None = None
    memory: dict[int, tuple[float, float]] = field(default_factory=dict)
    arguments: dict = field(default_factory=dict)
    declared: dict = field(default_factory=dict)
    printed: dict = field(default_factory=dict)  # settings from lines other than the argument dump
    line_gbs: int | None = None
    mock_evidence: str | None = None
    device_name: str | None = None
    gpu_vendor: str | None = None
    vendor_evidence: str | None = None
    networks: set[str] = field(default_factory=set)  # the collective library's networks, every rank's
    timed: bool = False  # a TPRIMAT_STEP line was seen: step time and memory come from TPrimat's own timer


# Field names (lower case, single spaces) -> what they are; names not listed are not parsed at all.
MEGATRON_FIELDS = {"elapsed time per iteration (ms)": "step_time_ms", "learning rate": "lr", "lm loss": "loss",
                   "grad norm": "grad_norm", "number of skipped iterations": "skipped",
                   "number of nan iterations": "nan", "global batch size": "gbs"}
MEMORY_FIELDS = {"max allocated": "allocated", "max reserved": "reserved"}
# NeMo's own timing and memory are raw figures (fw_*): TimingCallback's host time without a device sync,
# rank 0's peak reserved memory, and "memory_allocated", rank 0's current allocation (not a peak).
NEMO_FIELDS = {"global_step": "global_step", "lr": "lr", "reduced_train_loss": "loss", "train_loss": "loss",
               "train_step_timing in s": "fw_step_time_s", "grad_norm": "grad_norm", "grad norm": "grad_norm",
               "global_batch_size": "gbs", "peak_memory_usage": "fw_mem_reserved_gib",
               "max_memory_reserved": "fw_mem_reserved_gib", "memory_allocated": "fw_mem_allocated_now_gib",
               "max_memory_allocated": "fw_mem_allocated_gib", "tflops_per_gpu": "fw_tflops"}


@lru_cache(maxsize=512)
def _megatron_kind(raw_name: str) -> str | None:
    name = " ".join(raw_name.lower().split())
    if name in MEGATRON_FIELDS:
        return MEGATRON_FIELDS[name]
    if "tflop" in name:  # "throughput per GPU (TFLOP/s/GPU)", later "compute per GPU (TFLOP/s/GPU)"
        return "fw_tflops"
    if "tokens" in name and "gpu" in name:  # "tokens per GPU (tokens/s/GPU)", "tokens/s/GPU inst/harmonic mean"
        return "fw_tokens"
    if name.startswith(("hip mem usage", "rocm mem usage")):  # Primus: GiB (older builds spell it "GB")
        return "device_mem"
    return None


@lru_cache(maxsize=64)
def _memory_kind(raw_name: str) -> str | None:
    return MEMORY_FIELDS.get(" ".join(raw_name.lower().split()))


@lru_cache(maxsize=512)
def _nemo_kind(raw_name: str) -> str | None:
    return NEMO_FIELDS.get(" ".join(raw_name.lower().split()))


def _value(text: str) -> list[float] | None:
    """A field's numbers: "9.1E+00" -> [9.1]; "9004.1/9010.7" -> [9004.1, 9010.7]; units dropped.

    None unless every piece is a whole number, so a value cut or glued to other output is refused.
    """
    try:
        return [float(text)]
    except ValueError:
        pass
    numbers = []
    for piece in text.split("/"):
        match = NUMBER.match(piece.strip())
        if not match:
            return None
        numbers.append(float(match.group(1)))
    return numbers


def _count(value: float) -> int:
    """A count of NaN or skipped iterations; one that is no whole number >= 0 counts as one (flagged, not lost)."""
    return int(value) if math.isfinite(value) and value >= 0 and value.is_integer() else 1


def _batch(value: float) -> int | None:
    """A global batch size: a whole number above 0, else none (a damaged field)."""
    return int(value) if math.isfinite(value) and value >= 1 and value.is_integer() else None


def _fields(rest: str, complete: bool, kind_of) -> Iterable[tuple[str, list[float]]]:
    """(kind, numbers) for each known `name: value` between | separators.

    A line that was cut off (complete=False) loses its last field: its value may be partial.
    """
    segments = rest.split("|")
    if not complete:
        segments = segments[:-1]
    for segment in segments:
        name, sep, value = segment.rpartition(":")
        if not sep:
            continue
        kind = kind_of(name)
        if kind is None:
            continue
        numbers = _value(value)
        if numbers is not None:
            yield kind, numbers


def _new_record(step: int) -> dict:
    return {"step": step, "step_time_s": None, "loss": None, "lr": None, "grad_norm": None, "skipped": 0, "nan": 0,
            "mem_allocated_gib": None, "mem_reserved_gib": None}


def _megatron_record(step: int, rest: str) -> tuple[dict, int | None, bool]:
    """One Megatron/Primus iteration line -> (record, global batch size, shows Primus fields).

    Both end every field with " |", so text after the last "|" is no field: a line cut off, or cut short by
    another rank's output ("elapsed time per iteration (ms): 9" and a line end is a piece of 9295.0).
    """
    record, gbs, primus = _new_record(step), None, False
    for kind, numbers in _fields(rest, False, _megatron_kind):
        first = numbers[0]
        average = numbers[1] if len(numbers) > 1 else None
        if kind == "step_time_ms":
            record["step_time_s"] = first / 1000.0
            if average is not None:
                record["fw_step_time_avg_s"] = average / 1000.0
        elif kind in ("lr", "loss", "grad_norm"):
            record[kind] = first
        elif kind in ("skipped", "nan"):
            record[kind] = _count(first)
        elif kind == "gbs":
            gbs = _batch(first)
        elif kind in ("fw_tflops", "fw_tokens"):
            key = "fw_tflop_per_s_per_gpu" if kind == "fw_tflops" else "fw_tokens_per_s_per_gpu"
            record[key] = first
            if average is not None:
                record[key + "_avg"] = average
        elif kind == "device_mem":
            record.setdefault("mem_device_used_gib", first)
            primus = True
    return record, gbs, primus


def _nemo_record(iteration: int, rest: str, complete: bool) -> tuple[dict, int | None]:
    """One NeMo progress line -> (record, global batch size); NeMo counts from zero."""
    record, gbs = _new_record(iteration + 1), None
    for kind, numbers in _fields(rest, complete, _nemo_kind):
        first = numbers[0]
        if kind == "global_step" and math.isfinite(first):
            record["step"] = int(first) + 1
        elif kind in ("lr", "loss", "grad_norm", "fw_step_time_s"):
            record[kind] = first
        elif kind == "gbs":
            gbs = _batch(first)
        elif kind.startswith("fw_mem_"):  # bytes
            record[kind] = first / GIB
        elif kind == "fw_tflops":  # NeMo's FLOPs callback: its own (non-causal) convention
            record["fw_tflop_per_s_per_gpu"] = first
    return record, gbs


def _argument_value(text: str):
    """Megatron prints Python reprs: True/False/None, numbers, strings and lists."""
    if text in ("True", "False"):
        return text == "True"
    if text == "None":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


class _Stream:
    """Feeds cleaned lines in order and keeps only the current run."""

    def __init__(self) -> None:
        self.run = _Run(start_line=1)
        self.runs_found = 0
        self.pending = _Run(start_line=1)  # what precedes the first iteration of the next run
        self.error_seen = False
        self.notes: list[str] = []

    def line(self, number: int, text: str, complete: bool) -> None:
        timer = STEP_LINE.match(text) if STEP_MARKER in text else None
        if timer:
            self._timer(number, timer.group(1))
            return
        if "iteration" in text:
            nemo = NEMO_ITERATION.match(text) if "Training epoch" in text else None
            if nemo:
                rest = text[nemo.end():]
                record, gbs = _nemo_record(int(nemo.group(2)), rest, complete)
                self._step(number, record, int(nemo.group(3)) + 1, gbs, "nemo", complete, rest)
                return
            megatron = MEGATRON_ITERATION.match(text)
            if megatron:
                self._megatron(number, megatron, text, complete)
                return
            memory = MEMORY_REPORT.match(text)
            if memory:
                self._memory(int(memory.group(1)), text[memory.end():], complete)
                return
        if EFFECTIVE_MARKER in text:
            self._declared(text)
        if " ..." in text:
            argument = ARGUMENT.search(text)
            if argument:
                self._target().arguments[argument.group(1)] = _argument_value(argument.group(2))
                if argument.group(1) == "mock_data" and argument.group(2) == "True":
                    self._mock(text)
        if any(name in text for name in MOCK_CLASSES):
            self._mock(text)
        if "Traceback" in text or "out of memory" in text or "OutOfMemoryError" in text:
            self.error_seen = True
        self._printed(text)

    def _megatron(self, number: int, match: re.Match, text: str, complete: bool) -> None:
        rest = text[match.end():]
        record, gbs, primus_fields = _megatron_record(int(match.group(1)), rest)
        primus = primus_fields or bool(PRIMUS_PREFIX.search(match.group(0)))
        self._step(number, record, int(match.group(2)), gbs, "prim" if primus else "mega", complete, rest)
        usage = HIP_MEMORY.search(text) if primus_fields else None
        if usage:
            self._vendor(self.run, "amd", usage.group(0))

    def _printed(self, text: str) -> None:
        """Settings and hardware printed outside the argument dump (most of what a NeMo log says)."""
        target = self._target()
        found = PARALLEL_GROUP.search(text)
        if found:
            target.printed[GROUP_FIELDS[found.group(1)]] = len(found.group(2).split(","))
        found = MICROBATCHES.search(text)
        if found:
            target.printed["ga"] = int(found.group(1))
        found = PARAMETERS.search(text)
        if found:
            target.printed["parameters"] = int(found.group(1))
        found = CONFIG_REPR.search(text)
        if found:
            for name, raw in CONFIG_ITEM.findall(found.group(1)):
                value = _argument_value(raw.strip().strip("'"))
                if name in CONFIG_FIELDS and value is not None:
                    target.printed[CONFIG_FIELDS[name]] = value
        found = PADDED_VOCAB.search(text)
        if found:
            target.printed["padded_vocab_size"] = int(found.group(1) or found.group(2))
        found = DEVICE_LINE.search(text)
        if found and target.device_name is None:
            target.device_name = next(name for name in found.groups() if name)
        for pattern, vendor in GPU_STACKS:
            if pattern.search(text):
                self._vendor(target, vendor, text)
        found = COLLECTIVE_NETWORK.search(text)
        if found:  # communicators are also created once training runs (lazily, at a group's first use)
            for run in (target, self.run) if self.run.records else (target,):
                run.networks.add(found.group(1))

    @staticmethod
    def _vendor(run: _Run, vendor: str, text: str) -> None:
        if run.gpu_vendor is None:
            run.gpu_vendor, run.vendor_evidence = vendor, text.strip()[:160]

    def _target(self) -> _Run:
        """Settings printed before a run's first iteration belong to that (next) run."""
        return self.pending

    def _mock(self, text: str) -> None:
        target = self._target()
        if target.mock_evidence is None:
            target.mock_evidence = text.strip()[:300]

    def _declared(self, text: str) -> None:
        payload = text.split(EFFECTIVE_MARKER, 1)[1].strip()
        try:
            values = json.loads(payload)
        except json.JSONDecodeError:
            return
        if isinstance(values, dict):
            self._target().declared.update(values)

    def _timer(self, number: int, payload: str) -> None:
        """TPrimat's TPRIMAT_STEP line (train/nemo_timer.py); a line cut or broken by other output is skipped."""
        try:
            values = json.loads(payload)
            step, steps, seconds = int(values["step"]), int(values["steps"]), float(values["step_time_s"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            return
        record = _new_record(step)
        record["step_time_s"] = seconds
        for key, name in (("peak_allocated_bytes", "mem_allocated_gib"), ("peak_reserved_bytes", "mem_reserved_gib")):
            if isinstance(values.get(key), (int, float)):
                record[name] = values[key] / GIB
        self._step(number, record, steps, None, "timer", True, payload)
        self.run.timed = True

    def _memory(self, step: int, rest: str, complete: bool) -> None:
        values = dict(_fields(rest, complete, _memory_kind))
        allocated, reserved = values.get("allocated"), values.get("reserved")
        if allocated and reserved:
            self.run.memory[step] = (allocated[0] / 1024.0, reserved[0] / 1024.0)

    def _step(self, number: int, record: dict, total: int, gbs: int | None, kind: str, complete: bool,
              printed: str) -> None:
        """Keep a step of the current run, or start the next run where the step counter restarts.

        kind: the line that printed it (mega, prim, nemo or timer: TPrimat's TPRIMAT_STEP); printed: its text after
        the iteration number (the values, without the timestamp). The counter restarts
        (runs appended, a run resumed from a checkpoint) where a kind of line goes back to an earlier step, or
        prints the same step again with other values; NeMo's progress line may be redrawn, so only going back
        counts there. The same line printed twice is one step; a cut-off line is completed by a later one.
        """
        step, run = record["step"], self.run
        if step < 1:
            self.notes.append(f"line {number}: a step numbered {step} is no step (steps count from 1): ignored")
            return
        again, last = run.printed_lines.get((step, kind)), run.last_step.get(kind, 0)
        if again == printed and step == last:
            return
        restart = bool(run.records) and (step < last or (again is not None and kind != "nemo"))
        if not run.records or restart:
            if restart:
                self.runs_found += 1
            self.run = run = self._start(number)
        if complete:
            run.printed_lines[(step, kind)] = printed
        else:
            record["truncated"] = True
        existing = run.records.get(step)
        if existing is None:
            run.records[step] = record
        else:  # printed by another kind of line (NeMo's and TPrimat's), or completing a cut-off line
            for key, value in record.items():
                if existing.get(key) is None:
                    existing[key] = value
        run.last_step[kind] = max(run.last_step.get(kind, 0), step)
        run.total, run.framework = total, "nemo" if kind == "timer" else kind
        if gbs is not None:
            run.line_gbs = gbs

    def _start(self, number: int) -> _Run:
        run = self.pending
        run.start_line = number
        self.pending = _Run(start_line=number)
        return run


def complete_batch(values: dict) -> None:
    """Fill in place what the others imply: DP = GPUs / (TP x PP x CP), and the one missing factor of
    GBS = MBS x DP x GA (NeMo prints DP and GA but not MBS; Megatron prints MBS and DP but not GA)."""
    if not values.get("dp") and all(values.get(k) for k in ("num_gpus", "tp", "pp")):
        values["dp"] = values["num_gpus"] // (values["tp"] * values["pp"] * (values.get("cp") or 1))
    factors = ("mbs", "dp", "ga")
    missing = [key for key in factors if not values.get(key)]
    if values.get("gbs") and len(missing) == 1:
        values[missing[0]] = values["gbs"] // math.prod(values[key] for key in factors if key != missing[0])


def _precision(arguments: dict) -> str:
    """Megatron's precision flags as one name: fp8 (hybrid, e4m3, ...) over bf16 over fp16, else fp32."""
    if arguments.get("fp8") not in (None, False):
        return "fp8"
    return "bf16" if arguments.get("bf16") else "fp16" if arguments.get("fp16") else "fp32"


def _unfit(key: str, value) -> str | None:
    """What a setting's value should have been, where it is not that; None where it fits (or is None: unsaid)."""
    if value is None:
        return None
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    whole = number and isinstance(value, int)
    if key in WHOLE_ABOVE_ZERO and not (whole and value >= 1):
        return "a whole number above 0"
    if key in WHOLE_NUMBERS and not (whole and value >= 0):
        return "a whole number of 0 or more"
    if key in RATES and not (number and math.isfinite(value) and value >= 0):
        return "a finite number of 0 or more"
    return None


def _fitting(pairs: Iterable[tuple[str, str, object]], notes: list[str]) -> dict:
    """{key: value} of the (name in the log, key, value) triples whose value fits its key; the others named."""
    kept = {}
    for name, key, value in pairs:
        problem = _unfit(key, value)
        if problem:
            notes.append(f"the log's {name} is {value!r}, not {problem}: ignored")
        else:
            kept[key] = value
    return kept


def _effective(run: _Run, notes: list[str]) -> dict:
    """Settings the framework itself reports, keyed like the result's parallelism/training/model fields.

    The argument dump wins over other printed lines, the iteration lines over both for the global
    batch and the steps, and TPrimat's own TPRIMAT_EFFECTIVE line over everything. A value that is
    not what its setting must be is left out, with a note.
    """
    values = _fitting(((key, key, value) for key, value in run.printed.items()), notes)
    for name, value in run.arguments.items():
        # data_path and train_data_path both name the data: the one that is set wins over a None
        key = ARGUMENT_FIELDS.get(name)
        if key and (value is not None or values.get(key) is None):
            values.update(_fitting([(name, key, value)], notes))
    if "bf16" in run.arguments or "fp8" in run.arguments:
        values["precision"] = _precision(run.arguments)
    if "num_attention_heads" in values and "group_query_attention" in run.arguments:
        values["num_kv_heads"] = run.arguments.get("num_query_groups") if run.arguments["group_query_attention"] \
            else values["num_attention_heads"]
    if run.line_gbs is not None:
        values["gbs"] = run.line_gbs
    if run.total is not None:
        values.update(_fitting([("iteration lines' total", "steps", run.total)], notes))
    complete_batch(values)
    if values.get("parameters") is not None and (values.get("tp"), values.get("pp")) != (1, 1):
        del values["parameters"]  # one stage's share of a split model: not the model's count
    if run.mock_evidence is not None:
        values["mock_data"] = True
    if run.networks:
        values["collective_transport"] = ", ".join(sorted(run.networks))
        if "Socket" in run.networks or run.networks <= RDMA_NETWORKS:  # a plugin's network: not known here
            values["collective_rdma"] = "Socket" not in run.networks
    values.update(_fitting(((f"{EFFECTIVE_MARKER} {key}", key, value) for key, value in run.declared.items()), notes))
    return values


def _candidate_starts(block: bytes) -> list[int]:
    """Offsets of the lines in a block that contain a marker (found with bytes.find, not per line)."""
    starts = set()
    for marker in MARKERS:
        position = block.find(marker)
        while position != -1:
            starts.add(block.rfind(b"\n", 0, position) + 1)
            position = block.find(marker, block.find(b"\n", position))
    return sorted(starts)


def _feed(stream: _Stream, raw: bytes, number: int, complete: bool) -> None:
    text = raw.decode("utf-8", "replace")
    if "\x1b" in text:
        text = ANSI.sub("", text)
    pieces = text.split("\r")
    last = len(pieces) - 1
    for index, piece in enumerate(pieces):
        stream.line(number, piece, complete or index < last)


def _iterate(paths: Sequence[Path], stream: _Stream) -> tuple[int, bool, bytes]:
    """Feed every marked line of every log to the stream, block by block (memory stays bounded).

    Returns (lines read, whether a log ended mid-line, the last bytes of the last log).
    """
    lines, truncated, tail = 0, False, b""
    for path in paths:
        carry, tail = b"", b""
        with open(path, "rb") as handle:
            while block := handle.read(BLOCK):
                block = carry + block
                cut = block.rfind(b"\n") + 1
                block, carry = block[:cut], block[cut:]
                counted = 0
                for start in _candidate_starts(block):
                    end = block.find(b"\n", start)
                    lines += block.count(b"\n", counted, start)
                    counted = start
                    _feed(stream, block[start:end], lines + 1, True)
                lines += block.count(b"\n", counted)
                tail = (tail + block)[-TAIL_BYTES:]
        if carry:  # the last line has no line end: the log was cut off
            lines += 1
            truncated = True
            if any(marker in carry for marker in MARKERS):
                _feed(stream, carry, lines, False)
            tail = (tail + carry)[-TAIL_BYTES:]
    return lines, truncated, tail


def _clean_tail(tail: bytes) -> list[str]:
    """The last non-empty lines, without colours or progress-bar rewrites (for error excerpts)."""
    out = []
    for raw in tail.split(b"\n")[-TAIL_LINES - 1:]:
        text = ANSI.sub("", raw.decode("utf-8", "replace")).split("\r")
        kept = next((piece.rstrip() for piece in reversed(text) if piece.strip()), "")
        if kept:
            out.append(kept)
    return out[-TAIL_LINES:]


def parse_logs(paths: Sequence[str | Path], framework: str | None = None) -> ParsedLog:
    """Parse logs (in order, as one stream) into the last run's per-step records and settings.

    framework: what the caller knows the log to be (mega | prim | nemo); a different detected
    format is reported in warnings. Never raises on content: a log with no iteration line returns
    no records, and the caller decides.
    """
    if framework is not None and framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}; expected one of {', '.join(FRAMEWORKS)}")
    stream = _Stream()
    lines, truncated, tail = _iterate([Path(p) for p in paths], stream)
    run = stream.run if stream.run.records else stream.pending
    records = [run.records[step] for step in sorted(run.records)]
    notes = stream.notes
    if run.framework == "nemo" and records and not run.timed:
        _nemo_own_figures(records)
        notes.append("no TPRIMAT_STEP line: step times are NeMo's TimingCallback host times on rank 0 (no device "
                     "synchronisation; logging and callbacks between steps outside) and memory is rank 0's: not "
                     "comparable with other frameworks")
    for record in records:  # a step time of 0 or below is no duration: flagged with the nan/inf values
        seconds = record["step_time_s"]
        if seconds is not None and seconds <= 0:
            notes.append(f"step {record['step']}: step time {seconds:g} s is no duration (flagged like nan)")
            record["step_time_s"] = math.nan
    for step, (allocated, reserved) in run.memory.items():
        target = next((r for r in reversed(records) if r["step"] <= step), None)
        if target is not None:
            target["mem_allocated_gib"], target["mem_reserved_gib"] = allocated, reserved
    if stream.runs_found:
        notes.append(f"the log holds {stream.runs_found + 1} runs (the iteration counter restarts); "
                     f"the last one, from line {run.start_line}, is used")
    present = {k for k in ("step_time_s", "loss", "lr", "grad_norm") if any(r[k] is not None for r in records)}
    for record in records:
        lacking = sorted(k for k in present if record[k] is None)
        if lacking:
            notes.append(f"step {record['step']} lacks {', '.join(lacking)} (its line was broken by other output "
                         "or cut off): null there")
    if truncated:
        notes.append("the log ends in the middle of a line (the run was cut off)")
    if framework and run.framework and framework != run.framework and {framework, run.framework} != {"mega", "prim"}:
        notes.append(f"the log looks like {run.framework}, not {framework} as given")
    effective = _effective(run, notes)
    return ParsedLog(framework=run.framework, records=records, total_steps=run.total, truncated=truncated,
                     runs_found=stream.runs_found + (1 if records else 0), effective=effective,
                     mock_evidence=run.mock_evidence, error_seen=stream.error_seen, tail=_clean_tail(tail),
                     device_name=run.device_name, gpu_vendor=run.gpu_vendor, vendor_evidence=run.vendor_evidence,
                     warnings=notes, lines_read=lines)


def missing_steps(parsed: ParsedLog) -> list[int]:
    """The steps up to the last one recorded that the framework should have printed and did not.

    Megatron prints every log_interval-th iteration (the argument dump's, else every one), so a gap is a
    line lost (cut, broken beyond recognition, or never printed); steps after the last one recorded are
    the run's end, which steps_completed and the status already say.
    """
    interval = parsed.effective.get("log_interval") or 1
    seen = {record["step"] for record in parsed.records}
    last = max(seen, default=0)
    return [step for step in range(interval, last + 1, interval) if step not in seen]


def step_ranges(steps: Iterable[int]) -> str:
    """Steps in a few words: [4, 5, 6, 9] -> "4-6, 9"."""
    spans: list[list[int]] = []
    for step in sorted(set(steps)):
        if spans and step == spans[-1][1] + 1:
            spans[-1][1] = step
        else:
            spans.append([step, step])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _nemo_own_figures(records: list[dict]) -> None:
    """A NeMo log without TPrimat's timer (from elsewhere, or older): NeMo's own step time and peaks, where
    it reports them; its "memory_allocated" is a current allocation and never stands for a peak."""
    for record in records:
        record["step_time_s"] = record.get("fw_step_time_s")
        record["mem_reserved_gib"] = record.get("fw_mem_reserved_gib")
        record["mem_allocated_gib"] = record.get("fw_mem_allocated_gib")


def mock_data_evidence(paths: Sequence[str | Path]) -> str | None:
    """The first line of the last run showing synthetic data (MockGPTDataset, mock_data True), or None.

    Primus silently builds MockGPTDataset when mock_data stays true: a run meant to use real data
    must fail when this returns a line.
    """
    return parse_logs(paths).mock_evidence


def effective_settings(paths: Sequence[str | Path]) -> dict:
    """Settings the framework reports in its log (argument dump, TPRIMAT_EFFECTIVE {json} lines,
    iteration lines), keyed like the result's fields: tp, pp, dp, ga, mbs, gbs, seq_len, steps,
    precision, sequence_parallel, distributed_optimizer, mock_data, data_path, ..."""
    return parse_logs(paths).effective
