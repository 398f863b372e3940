"""The settings a log prints: Megatron's argument dump, megatron-core's own lines, TPrimat's TPRIMAT_EFFECTIVE lines,
and the hardware and network they name, as one dict in TPrimat's names (a framework's own lines are its log
format's: utils.frameworks.log_format).

Megatron-LM (and Primus, which prints its dump) names settings its own way: MEGATRON_NAMES translates the
names TPrimat spells otherwise, and SAME_NAMES lists those TPrimat reads as they are (the result's and
utils/spec/fairness.py's names are Megatron's where they can be). Nothing else is renamed.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Iterable

from evaluate.logs.formats import argument_readers
from utils.spec.precision import read_back

if TYPE_CHECKING:
    from evaluate.logs.stream import Run

ARGUMENT = re.compile(r"(?:^|[\s:])([a-z_][a-z0-9_]*) \.{3,} (.*?)\s*$")
EFFECTIVE_MARKER = "TPRIMAT_EFFECTIVE"
MOCK_CLASSES = ("MockGPTDataset", "MockDataModule")
MICROBATCHES = re.compile(r"setting number of microbatches to constant (\d+)")  # megatron-core
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
# NCCL's (and RCCL's) init.cc at every communicator's creation, NCCL_DEBUG=INFO: "NCCL INFO Using network IB".
COLLECTIVE_NETWORK = re.compile(r"\bNCCL INFO Using network (\S.*?)\s*$")
RDMA_NETWORKS = frozenset({"IB"})  # NCCL's built-in RDMA transport, InfiniBand and RoCE alike

# Megatron's names (its argument dump, megatron-core's config reprs) that TPrimat spells otherwise -> TPrimat's
# (the result's parallelism/training fields, utils/spec/fairness.py's).
MEGATRON_NAMES = {
    "tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp", "data_parallel_size": "dp",
    "context_parallel_size": "cp", "expert_model_parallel_size": "ep", "world_size": "num_gpus",
    "micro_batch_size": "mbs", "global_batch_size": "gbs",
    "seq_length": "seq_len", "sequence_length": "seq_len", "train_iters": "steps", "random_seed": "seed",
    "use_distributed_optimizer": "distributed_optimizer", "lr_warmup_iters": "warmup_steps",
    "adam_beta1": "beta1", "adam_beta2": "beta2", "clip_grad": "grad_clip", "train_data_path": "data_path",
    "add_qkv_bias": "qkv_bias", "check_for_nan_in_loss_and_grad": "check_for_nan_in_grad",
    "accumulate_allreduce_grads_in_fp32": "grad_reduce_in_fp32", "ddp_average_in_collective": "average_in_collective",
}
# Megatron's names TPrimat reads as they are: the schedule, the data, the architecture, the workload conventions,
# the fairness profile's DDP and FP8 settings, the kernels, and log_interval (Megatron prints every log_interval-th iteration).
SAME_NAMES = frozenset({
    "sequence_parallel", "seed", "lr", "min_lr", "lr_decay_style", "weight_decay", "mock_data", "data_path",
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "init_method_std", "eod_mask_loss",
    "dataloader_type", "padded_vocab_size", "overlap_grad_reduce", "overlap_param_gather", "fp8_amax_history_len",
    "fp8_amax_compute_algo", "log_interval", "attention_softmax_in_fp32",
    # the kernels a Megatron-LM run chose (the result's features): Transformer Engine's attention or Primus-Turbo's
    "attention_backend", "enable_primus_turbo", "use_turbo_attention",
})
# The padded vocabulary as built: Megatron-LM/Primus " > padded vocab (size: 151665) with 399 dummy tokens
# (new size: 152064)"; NeMo 2.3 "Use preset vocab_size: 152064, ..." or "Padded vocab_size: 152064, ...".
PADDED_VOCAB = re.compile(r"padded vocab \(size: \d+\) with \d+ dummy tokens \(new size: (\d+)\)"
                          r"|(?:Use preset|Padded) vocab_size: (\d+),")
# What a setting must be: sizes and counts are whole numbers above 0, the seed and the warm-up whole numbers,
# rates finite numbers >= 0. A value printed otherwise (a damaged line) is no setting: ignored, and named.
WHOLE_ABOVE_ZERO = frozenset({"tp", "pp", "dp", "cp", "ep", "ga", "mbs", "gbs", "seq_len", "steps", "num_gpus",
                              "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads",
                              "padded_vocab_size", "parameters", "log_interval"})
WHOLE_NUMBERS = frozenset({"seed", "warmup_steps", "fp8_amax_history_len"})
RATES = frozenset({"lr", "min_lr", "weight_decay", "beta1", "beta2", "grad_clip", "init_method_std"})


def setting_name(megatron_name: str) -> str | None:
    """TPrimat's name of a setting Megatron prints under megatron_name; None for one TPrimat does not read."""
    return MEGATRON_NAMES.get(megatron_name) or (megatron_name if megatron_name in SAME_NAMES else None)


def argument_value(text: str):
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
    """Megatron's precision flags as one name: below 16 bits as PRECISION names it (fp8 with any recipe, mxfp8,
    nvfp4, Primus's mxfp4: utils.spec.precision.read_back) over bf16 over fp16, else fp32."""
    if low := read_back(arguments):
        return low
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


def effective(run: Run, notes: list[str]) -> dict:
    """Settings the framework itself reports, keyed like the result's parallelism/training/model fields.

    The argument dump wins over other printed lines, the iteration lines over both for the global
    batch and the steps, and TPrimat's own TPRIMAT_EFFECTIVE line over everything. A value that is
    not what its setting must be is left out, with a note.
    """
    values = _fitting(((key, key, value) for key, value in run.printed.items()), notes)
    for name, value in run.arguments.items():
        # data_path and train_data_path both name the data: the one that is set wins over a None
        key = setting_name(name)
        if key and (value is not None or values.get(key) is None):
            values.update(_fitting([(name, key, value)], notes))
    for implied in argument_readers():  # what the registered formats read from the dump as a whole (effective.moe)
        values.update(implied(run.arguments))
    if "bf16" in run.arguments or "fp8" in run.arguments or "fp4" in run.arguments:
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

