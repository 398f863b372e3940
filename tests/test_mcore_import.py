"""utils.mcore_import: megatron-core imported for its data pipeline and schedule without loading torch's compiler."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from utils.mcore_import import unchanged

REPO = Path(__file__).resolve().parent.parent

CHECK = """
import sys, torch
compile_ = torch.compile
from utils import mcore_import
mcore_import.for_data()
from megatron.core import jit
print(torch.compile is compile_, jit.jit_fuser is mcore_import.unchanged, "torch._inductor.compile_fx" in sys.modules)
"""


def test_megatron_core_imported_for_its_data_leaves_torchs_compiler_unloaded_and_torch_compile_as_it_was():
    out = subprocess.run([sys.executable, "-c", CHECK], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "False"]


def test_the_stand_in_compiles_nothing_as_a_call_or_as_a_decorator_with_options():
    def kernel(x):
        return x + 1

    assert unchanged(kernel) is kernel
    assert unchanged(mode="max-autotune")(kernel) is kernel
