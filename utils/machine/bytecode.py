"""Write the bytecode of what TPrimat's runs import, into .venv and the checkout, whatever PYTHONDONTWRITEBYTECODE says.

    python3 -m utils.machine.bytecode        (shell/lib.sh, with .venv's Python, once requirements/host.txt is installed)

.venv's packages are installed without their bytecode: compiling all of it (uv --compile-bytecode) compiled 15,800
modules of 5.9 GB, 74 CPU seconds on a 2-core EPYC, most of them never imported (pandas, transformers' other
models, most of sympy and scipy). Instead this imports what the runs import (MODULES: torch and torchrun,
megatron-core's parts the trainers use, transformers' Llama and Qwen 2 models, DeepSpeed, the tokenizers, matplotlib
and the evaluation's packages) with bytecode writing on, so that Python writes theirs once (about 4,000 modules: 21
CPU seconds beyond the imports themselves), in two processes side by side (the modules that import torch, and the
rest), and compiles the checkout's own packages (PACKAGES). Where
PYTHONDONTWRITEBYTECODE is set, Python writes no bytecode itself, so without this every process of every run compiled
torch and megatron-core again (a training worker's imports took 17 s instead of 6 s), and TPrimat's own modules
(about 0.3 s per process); elsewhere the first run would carry the compilation. A module a run imports that is not
listed is compiled by the process that imports it, as Python always does: slower, never wrong.

Exit: 0 written; 1 a module did not import (named in one line each: .venv is incomplete) or a package did not
compile.
"""

from __future__ import annotations

import argparse
import compileall
import importlib
import os
import subprocess
import sys
import warnings
from contextlib import contextmanager
from typing import Iterator

from utils import ROOT
from utils.cli import Parser

# What the CPU's runs import, at start or when a run needs it: torchrun, the trainers (mega, fsdp, autotp), the data
# stages, the launcher's tools and the report, in two groups written side by side, since only the first imports torch
# (about three quarters of the work). Each imports what it imports in turn.
MODULES = {
    "torch": (
        "torch", "torch.distributed.run", "torch.distributed.elastic.rendezvous.c10d_rendezvous_backend",
        "torch.distributed.fsdp", "torch.distributed.tensor.parallel", "torch.utils.cpp_extension",
        "megatron.core", "megatron.core.datasets.blended_megatron_dataset_builder",
        "megatron.core.datasets.gpt_dataset", "megatron.core.distributed", "megatron.core.models.gpt.gpt_layer_specs",
        "megatron.core.models.mimo", "megatron.core.optimizer", "megatron.core.optimizer_param_scheduler",
        "megatron.core.pipeline_parallel", "transformers.models.auto.modeling_auto",
        "transformers.models.llama.modeling_llama", "transformers.models.qwen2.modeling_qwen2",
        "transformers.models.mistral.configuration_mistral",
        "deepspeed", "deepspeed.module_inject", "deepspeed.module_inject.auto_ep_layer",
        "deepspeed.ops.op_builder.all_ops", "deepspeed.runtime.zero.muon"),
    "rest": (
        "transformers", "transformers.convert_slow_tokenizer",
        "tokenizers", "tiktoken", "numpy", "ftfy", "huggingface_hub", "jsonschema", "yaml", "psutil", "markdown_it",
        "matplotlib.pyplot", "matplotlib.backends.backend_agg", "scipy.stats"),
}
PACKAGES = ("data", "train", "evaluate", "utils")  # the checkout's own, run as modules from its root


@contextmanager
def silenced() -> Iterator[None]:
    """The imports' own chatter (megatron-core's and DeepSpeed's warnings on a CPU) kept off the terminal."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(os.devnull, "w") as null, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        os.dup2(null.fileno(), 1)
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            for fd, copy in zip((1, 2), saved):
                os.dup2(copy, fd)
                os.close(copy)


def import_all(modules: tuple[str, ...]) -> list[str]:
    """Import each module with bytecode writing on; one line per module that did not import."""
    sys.dont_write_bytecode = False  # the point of this tool: PYTHONDONTWRITEBYTECODE's default turned off, here only
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # DeepSpeed asks no GPU library, as autotp on the CPU runs it
    problems = []
    for name in modules:
        try:
            with silenced():
                importlib.import_module(name)
        except Exception as err:  # noqa: BLE001 - any failure to import is reported, by name
            problems.append(f"{name}: {type(err).__name__}: {err}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m utils.machine.bytecode", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--group", choices=list(MODULES), help="only this group of modules (without it: the checkout's "
                        "packages and the torch group here, the rest in a process beside it)")
    group = parser.parse_args(argv).group
    beside = None if group else subprocess.Popen([sys.executable, "-m", "utils.machine.bytecode", "--group", "rest"],
                                                 cwd=ROOT)
    problems = [] if group else [f"{package}: did not compile (above)" for package in PACKAGES
                                 if not compileall.compile_dir(ROOT / package, quiet=1)]
    problems += import_all(MODULES[group or "torch"])
    for problem in problems:
        print(f"[tprimat] error: bytecode: {problem}", file=sys.stderr)
    return 1 if problems or (beside is not None and beside.wait() != 0) else 0


if __name__ == "__main__":
    sys.exit(main())
