"""utils.machine.compile_aside: a stack's modules imported without torch's compiler where they compile kernels the importer
never runs, torch.compile put back after, and the upstream lines that make it so read back from the installed stacks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from utils import upstream
from utils.machine.compile_aside import unchanged

REPO = Path(__file__).resolve().parent.parent


def run(code: str) -> list[str]:
    """The last line a fresh process prints (each test imports a stack from scratch; DeepSpeed logs before it), on
    DeepSpeed's CPU accelerator as autotp runs it here."""
    prelude = "import sys, torch\ncompile_ = torch.compile\nfrom utils.machine import compile_aside\n"
    out = subprocess.run([sys.executable, "-c", prelude + code], cwd=REPO, capture_output=True, text=True, check=True,
                         env={**os.environ, "DS_ACCELERATOR": "cpu"})
    return out.stdout.splitlines()[-1].split()


def test_megatron_core_imported_for_its_data_leaves_torchs_compiler_unloaded_and_torch_compile_as_it_was():
    assert run("compile_aside.megatron_core()\nfrom megatron.core import jit\n"
               "print(torch.compile is compile_, jit.jit_fuser is compile_aside.unchanged, "
               "'torch._inductor.compile_fx' in sys.modules)") == ["True", "True", "False"]


def test_deepspeeds_muon_module_imported_aside_keeps_its_kernels_plain_and_torch_compile_real():
    assert run("compile_aside.deepspeed_muon()\nfrom deepspeed.runtime.zero.muon import original_muon\n"
               "kernel = original_muon.zeropower_via_newtonschulz5\n"
               "print(torch.compile is compile_, hasattr(kernel, '_torchdynamo_orig_callable'), "
               "'torch._inductor.compile_fx' in sys.modules)") == ["True", "False", "False"]


def test_the_stand_in_compiles_nothing_as_a_call_or_as_a_decorator_with_options():
    def kernel(x):
        return x + 1

    assert unchanged(kernel) is kernel
    assert unchanged(mode="max-autotune")(kernel) is kernel


def test_the_hosts_megatron_core_and_deepspeed_hold_every_line_the_table_records_of_them():
    facts = tuple(fact for fact in upstream.installed_facts() if fact.source in ("megatron-core-0.19.2",
                                                                                  "deepspeed-0.19.8"))
    assert {fact.source for fact in facts} == {"megatron-core-0.19.2", "deepspeed-0.19.8"}
    assert upstream.problems(facts, upstream.read_installed) == []
