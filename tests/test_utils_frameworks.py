"""utils.frameworks: the framework registry, from which every table about frameworks comes (the configuration, the
workload, the judge, the probe, the platform environment, the schema's enum, the report's names)."""

import importlib
import os
import subprocess
import sys

import pytest

from evaluate.comparison.repeats import FRAMEWORK_NAMES
from evaluate.logs import formats
from utils import ROOT, frameworks
from utils.config import FRAMEWORKS
from utils.machine import platform_env, probe
from utils.spec.fairness import workload
from utils.spec.models import MODEL_KEYS


def test_each_platform_runs_megatron_its_vendors_framework_and_the_torch_native_ones():
    assert {platform: frameworks.on(platform) for platform in ("nvd", "amd", "cpu")} == \
        {"nvd": ("mega", "nemo", "mbridge", "fsdp", "autotp", "torchtitan"),
         "amd": ("mega", "prim", "fsdp", "autotp", "torchtitan"),
         "cpu": ("mega", "fsdp", "autotp")}  # torchtitan 0.3.0 starts CUDA/NCCL without a GPU: docs/frameworks.md
    assert [name for name in frameworks.NAMES if frameworks.torch_native(name)] == list(frameworks.NATIVE)


def test_a_vendors_framework_is_the_one_only_its_platform_runs():
    assert [frameworks.vendor_frameworks(p) for p in ("nvd", "amd", "cpu")] == [("nemo", "mbridge"), ("prim",), ()]


def test_the_configuration_knows_exactly_the_tables_frameworks():
    assert FRAMEWORKS == frameworks.NAMES == ("mega", "prim", "nemo", "mbridge", "fsdp", "autotp", "torchtitan")


def test_the_workload_records_each_frameworks_warm_up_convention():
    assert {name: workload(name, 128256, 1)["lr_warmup_convention"] for name in frameworks.NAMES} == \
        {"mega": "megatron", "prim": "megatron", "nemo": "nemo-cosine-annealing", "mbridge": "megatron",
         "fsdp": "megatron", "autotp": "megatron", "torchtitan": "torchtitan"}


def test_tprimats_own_trainers_write_their_result_and_the_vendors_logs_are_extracted():
    assert [name for name, spec in frameworks.TABLE.items() if spec.own_trainer] == ["mega", "fsdp", "autotp"]


# --- Every table about frameworks comes from the registry ----------------------------------------------------------

def test_each_entry_names_a_trainer_that_exists_or_a_command_builder_that_imports():
    for entry in frameworks.TABLE.values():
        if entry.trainer:
            assert (ROOT / entry.trainer).is_file(), entry
        else:
            module, _, function = entry.command.partition(":")
            assert callable(getattr(importlib.import_module(module), function)), entry


def test_the_tables_of_other_modules_are_the_registrys():
    assert probe.FRAMEWORK_MODULES == {name: entry.probe_modules for name, entry in frameworks.TABLE.items()}
    assert FRAMEWORK_NAMES == {name: entry.display_name for name, entry in frameworks.TABLE.items()}
    assert tuple(formats.by_name()) == tuple(name for name, entry in frameworks.TABLE.items() if entry.log_format)
    assert all(set(entry.model_names or ()) <= set(MODEL_KEYS) for entry in frameworks.TABLE.values())
    assert platform_env.platform_env("cpu", "autotp")["DS_ACCELERATOR"] == "cpu"  # the entry's env


def test_a_bad_entry_is_refused_when_it_is_declared():
    with pytest.raises(ValueError, match="exactly one of trainer and command"):
        frameworks.Framework("x", "X", ("cpu",), "megatron", (), trainer="a.py", command="m:f")
    with pytest.raises(ValueError, match="writes no result: name its log_format"):
        frameworks.Framework("x", "X", ("cpu",), "megatron", (), command="m:f")
    with pytest.raises(ValueError, match="log_format 'mega' is not \"package.module:NAME\""):
        frameworks.Framework("x", "X", ("cpu",), "megatron", (), command="m:f", log_format="mega")
    with pytest.raises(ValueError, match="memory_model 'zero' is not one of"):
        frameworks.Framework("x", "X", ("cpu",), "megatron", (), trainer="a.py", memory_model="zero")


def test_a_framework_kept_outside_registers_by_naming_its_entry_module(tmp_path):
    (tmp_path / "outside.py").write_text(
        "from utils.frameworks import Framework\n"
        "FRAMEWORK = Framework('outside', 'Outside', ('cpu',), 'megatron', (), trainer='outside.py')\n")
    probe_code = "from utils import frameworks; print(frameworks.NAMES, frameworks.on('cpu'))"
    out = subprocess.run([sys.executable, "-c", probe_code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}", frameworks.EXTRA_ENV: "outside"})
    assert out.stdout.strip() == ("('mega', 'prim', 'nemo', 'mbridge', 'fsdp', 'autotp', 'torchtitan', 'outside') "
                                  "('mega', 'fsdp', 'autotp', 'outside')"), out.stderr
