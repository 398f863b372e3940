"""Each low precision in a dry run of shell/train.sh on faked NVIDIA (B200) and AMD (MI355X) nodes, TARGET_DEVICE
set: every framework with the precision's switch writes it where its framework reads it (mega's request, NeMo's
plugin, Megatron-Bridge's preset, Primus's experiment), every other is skipped with the line saying why."""

from __future__ import annotations

import pytest

from tests.fixtures.train_matrix.shell import machine, read, request, run_dirs
from train.prim.config import overrides
from utils import frameworks
from utils.machine.hardware import TARGET_DEVICES, lookup_device
from utils.spec import stacks

# (platform, device, PRECISION, FP8_RECIPE, STACK) -> the frameworks that run and the switch each writes; the rest
# of the stack's frameworks are skipped. Each case names its row, whose megatron-core decides the answer:
# nemo-26.08 (0.19), nemo-25.04 (0.12), primus-v26.5 (0.16).
NEMO, PRIMUS = "nemo-26.08", "primus-v26.5"
CASES = {
    ("nvd", "b200", "fp8", "delayed", NEMO): {"mega": "delayed", "mbridge": "bf16_with_fp8_delayed_scaling_mixed"},
    ("nvd", "b200", "fp8", "tensorwise", NEMO): {"mega": "tensorwise", "mbridge": "bf16_with_fp8_current_scaling_mixed",
                                                 "fsdp": "tensorwise"},
    ("nvd", "h100", "fp8", "blockwise", NEMO): {"mega": "blockwise",
                                                "mbridge": "bf16_with_fp8_subchannel_scaling_mixed"},
    ("nvd", "b200", "mxfp8", "delayed", "nemo-25.04"): {"mega": "mxfp8", "nemo": "bf16_with_mxfp8_mixed"},
    ("nvd", "b200", "nvfp4", "delayed", NEMO): {"mega": "nvfp4", "mbridge": "bf16_with_nvfp4_mixed"},
    ("nvd", "b200", "mxfp4", "delayed", NEMO): {},
    ("amd", "mi355x", "mxfp8", "delayed", PRIMUS): {"mega": "mxfp8", "prim": "mxfp8"},  # FP8's recipes: as on NVIDIA
    ("amd", "mi355x", "mxfp4", "delayed", PRIMUS): {"prim": "mxfp4"},
    ("amd", "mi300x", "mxfp8", "delayed", PRIMUS): {},
}


def switch(framework: str, run_dir) -> str:
    """The precision's switch as the framework's own generated file names it."""
    if framework == "nemo":
        return read(run_dir / "nemo_settings.json")["precision"]["plugin"]
    if framework == "mbridge":
        return read(run_dir / "mbridge_settings.json")["mixed_precision"]["preset"]
    if framework == "prim":  # the experiment's overrides (the stand-in checkout ships no FP8 file to write them on)
        o = overrides(request(run_dir))
        return o.get("fp4_recipe") if o.get("fp4") else o["fp8_recipe"] if o["fp8"] else "bf16"
    req = request(run_dir)  # mega and fsdp build theirs from the request (train/mega/model.py, train/fsdp/engine.py)
    return req.result_training()["fp8_recipe"]["fp8_recipe"]


@pytest.mark.parametrize("case", CASES, ids="-".join)
def test_a_low_precision_writes_each_frameworks_switch_and_skips_the_others_saying_why(tmp_path, case):
    platform, device, precision, recipe, stack = case
    fake = machine(tmp_path, **{"nvidia" if platform == "nvd" else "amd": 8})
    result = fake.run("shell/train.sh", DRY_RUN="1", MODELS="llama", FRAMEWORK="all", TARGET_DEVICE=device,
                      PRECISION=precision, FP8_RECIPE=recipe, STACK=stack)
    assert result.returncode == (0 if CASES[case] else 2), result.output  # nothing to run: refused, exit 2
    ran = {request(d).identity.framework: d for d in run_dirs(tmp_path / "output")} if CASES[case] else {}
    assert {name: switch(name, d) for name, d in ran.items()} == CASES[case]
    skipped = [line for line in result.output.splitlines() if line.split()[:1] and line.split()[0].isdigit()
               and " skipped: " in line]  # the plan's table: one line per run
    row = stacks.get(stack)
    assert len(skipped) + len(ran) == len([name for name in row.frameworks if name in frameworks.TABLE])
    if device == "mi300x":  # the device lacks it: every line says so
        assert skipped and all(f"PRECISION={precision}: {lookup_device(TARGET_DEVICES[device]).name} has no "
                               f"{precision.upper()} matrix units" in line for line in skipped)
