"""The training precisions: the values PRECISION and FP8_RECIPE take, the switch each is in the stacks' own APIs, the
peak it runs at and the bytes per parameter it adds. One table, so that the configuration, the framework entries,
the plan's skips, MFU's peak and the memory prediction name a precision alike.

- bf16: BF16 mixed precision (fp32 master weights, bf16 weights and GEMMs); fp32: the CPU without bf16 instructions.
- fp8 with FP8_RECIPE: `delayed` (Transformer Engine's DelayedScaling: a scale from an amax history), `tensorwise`
  (Float8CurrentScaling: each tensor's own amax at each cast; torchao's float8 "tensorwise" recipe), `blockwise`
  (Float8BlockScaling: 1x128 activation and 128x128 weight blocks, each with an fp32 scale). The recipe is a knob of
  its own, not a PRECISION value, because every recipe is one format (E4M3/E5M2 GEMMs at the device's FP8 rate):
  PRECISION names what the tensor cores compute, FP8_RECIPE how its scales are chosen, and results record both.
- mxfp8, mxfp4: the OCP Microscaling formats (OCP MX specification v1.0): blocks of 32 elements sharing one E8M0
  (power-of-two) scale, FP8 or FP4 (E2M1) elements. nvfp4: NVIDIA's FP4 (E2M1) in blocks of 16 with an E4M3 scale and
  one fp32 scale per tensor (Transformer Engine's NVFP4BlockScaling).

Standard library only: utils.config and utils.frameworks read it before any environment exists.
"""

from __future__ import annotations

import re

PRECISIONS = ("bf16", "fp8", "mxfp8", "mxfp4", "nvfp4", "fp32")  # PRECISION's values (besides auto)
FP8_RECIPES = ("delayed", "tensorwise", "blockwise")  # FP8_RECIPE's values, used with PRECISION=fp8 only
DEFAULT_FP8_RECIPE = "delayed"  # the fairness profile's recipe (utils.spec.fairness.SPEC), TPrimat's FP8 until now
LOW = ("fp8", "mxfp8", "mxfp4", "nvfp4")  # the precisions whose GEMMs run below 16 bits (Transformer Engine, torchao)

# How much higher (relative) a low precision's validation loss may be than its BF16 twin's at equal tokens before the
# report flags it (evaluate/comparison/quality.py; PRECISION_LOSS_TOLERANCE overrides it). MLPerf's quality rule is the
# reference: every submission must reach the same target log-perplexity whatever its precision, so a loss that stays
# higher costs tokens, and time, to the target. 1%: NVIDIA's NVFP4 pretraining report (arXiv 2509.25149) counts its
# 12B model's loss within 1.5% of FP8's after 10T tokens as matching, and FP8 recipes track BF16 closer still; a gap
# above 1% of a loss near 3.3 (0.033 nats) is larger than that, and larger than the run-to-run noise of repeats.
LOSS_TOLERANCE = 0.01

# The device table's peak each precision's GEMMs run at (utils.machine.hardware.DeviceSpec.peak_tflops): MXFP8 runs
# at the FP8 rate and both FP4 formats at the FP4 rate on B200 and MI355X (NVIDIA Blackwell datasheet, AMD CDNA 4
# whitepaper); the CPU's fp32 has no table peak.
PEAK_CLASS = {"bf16": "bf16", "fp8": "fp8", "mxfp8": "fp8", "mxfp4": "fp4", "nvfp4": "fp4", "fp32": None}

# The switch in megatron-core's TransformerConfig (and so in mega, Megatron-Bridge's MixedPrecisionConfig, NeMo's
# MegatronMixedPrecision and Primus's Megatron-LM arguments): the format field and the recipe field. FP8's format is
# the profile's fp8_format (hybrid: E4M3 forward, E5M2 gradients), also under MXFP8, so that the recipes differ only
# in their scaling; FP4's only format is E2M1. mxfp4 is Primus's own value of fp4_recipe (its MI355X configs),
# which upstream megatron-core does not have.
MEGATRON_SWITCH = {
    "fp8": ("fp8", "fp8_recipe"), "mxfp8": ("fp8", "fp8_recipe"),
    "nvfp4": ("fp4", "fp4_recipe"), "mxfp4": ("fp4", "fp4_recipe"),
}
FP4_FORMAT = "e2m1"

# The first megatron-core release TPrimat knows to have each recipe (megatron/core/enums.py Fp8Recipe, Fp4Recipe):
# 0.12.3 has delayed, tensorwise and mxfp8; 0.15.3 adds blockwise and Fp4Recipe.nvfp4 (with the fp4 fields); 0.16.1
# and 0.19.2 have all of them. These are the versions the stacks carry (utils.spec.stacks), each installed and read
# by tests/test_utils_precision.py. No upstream release has mxfp4.
MEGATRON_CORE_SINCE = {"delayed": (0, 12), "tensorwise": (0, 12), "mxfp8": (0, 12), "blockwise": (0, 15),
                       "nvfp4": (0, 15)}

# Bytes per parameter a precision keeps beyond BF16 training's, for each weight its GEMMs read (the decoder's
# linear layers): the quantized copies of the weight, one per direction a GEMM reads it (row-wise in the forward,
# column-wise in the backward's data gradient), with their scales; kept from the forward to the backward, and across
# the microbatches of a step (Transformer Engine's weight cache, is_first_microbatch). Per copy:
# FP8 per-tensor (delayed, tensorwise): 1 byte (the amax history is 1024 fp32 values per tensor: negligible);
# blockwise: 1 + 4/(128*128) (one fp32 scale per 128x128 block); MXFP8: 1 + 1/32 (one E8M0 byte per 32);
# MXFP4: 0.5 + 1/32; NVFP4: 0.5 + 1/16 (one E4M3 byte per 16). torchao's float8 (fsdp) casts in each forward and
# keeps no copy across microbatches: its casts are temporaries, not modelled.
_COPY_BYTES = {"delayed": 1.0, "tensorwise": 1.0, "blockwise": 1 + 4 / (128 * 128), "mxfp8": 1 + 1 / 32,
               "mxfp4": 0.5 + 1 / 32, "nvfp4": 0.5 + 1 / 16}


def recipe(precision: str, fp8_recipe: str = DEFAULT_FP8_RECIPE) -> str | None:
    """The recipe a precision trains with, as megatron-core's fp8_recipe/fp4_recipe names it: FP8's is FP8_RECIPE,
    each block-scaled format is its own recipe; None for bf16 and fp32."""
    if precision == "fp8":
        return fp8_recipe
    return precision if precision in LOW else None


def switch_key(precision: str, fp8_recipe: str = DEFAULT_FP8_RECIPE) -> str:
    """What picks a framework's switch: the recipe below 16 bits (delayed, tensorwise, blockwise, mxfp8, mxfp4,
    nvfp4), else the precision (bf16, fp32): the keys of NeMo's plugin and Megatron-Bridge's preset tables."""
    return recipe(precision, fp8_recipe) or precision


def name(precision: str, fp8_recipe: str = DEFAULT_FP8_RECIPE) -> str:
    """How lines and tables name a run's precision: "fp8 (tensorwise)", "mxfp8", "bf16"."""
    return f"fp8 ({fp8_recipe})" if precision == "fp8" else precision


def megatron_settings(precision: str, fp8_recipe: str, fp8_format: str) -> dict[str, object]:
    """The precision's switch in megatron-core's TransformerConfig names: {} for bf16 and fp32, else the format and
    recipe fields (fp8 and fp8_recipe, or fp4 and fp4_recipe)."""
    if precision not in MEGATRON_SWITCH:
        return {}
    fmt, field = MEGATRON_SWITCH[precision]
    return {fmt: FP4_FORMAT if fmt == "fp4" else fp8_format, field: recipe(precision, fp8_recipe)}


def read_back(config: object) -> str | None:
    """The precision below 16 bits a megatron-core config (TransformerConfig, NeMo's or Megatron-Bridge's
    mixed-precision config, or Megatron-LM's arguments as a log prints them: a dict) trains with, named as PRECISION
    names it; None when it has neither fp8 nor fp4 set."""
    def value(name: str) -> str | None:
        found = config.get(name) if isinstance(config, dict) else getattr(config, name, None)
        return None if found in (None, False) else str(getattr(found, "value", found))
    if value("fp4"):
        return value("fp4_recipe")
    if value("fp8"):
        return "mxfp8" if value("fp8_recipe") == "mxfp8" else "fp8"
    return None


def version_tuple(version: str) -> tuple[int, int] | None:
    """A stack's megatron-core version as (major, minor); None where it names none."""
    found = re.match(r"\s*(\d+)\.(\d+)", version or "")
    return (int(found.group(1)), int(found.group(2))) if found else None


def megatron_core_lacks(version: str, precision: str, fp8_recipe: str) -> str:
    """Why a megatron-core version has no switch for a precision (one phrase), or "" when it has one."""
    wanted = recipe(precision, fp8_recipe)
    if wanted is None:
        return ""
    since = MEGATRON_CORE_SINCE.get(wanted)
    if since is None:
        return f"megatron-core has no {wanted} recipe (its Fp4Recipe has nvfp4 only)"
    have = version_tuple(version)
    if have is not None and have < since:
        return f"megatron-core {version} has no {wanted} recipe (from {since[0]}.{since[1]})"
    return ""


# Primus's block-scaled configs (examples/megatron/configs/MI355X/llama3.1_8B-{MXFP8,MXFP4}-pretrain.yaml: fp8_recipe
# mxfp8; fp4 e2m1 with Primus's own fp4_recipe mxfp4) ship from its v26 releases; v25.11 ships none.
PRIMUS_SINCE = {"mxfp8": (26, 0), "mxfp4": (26, 0)}


def primus_lacks(release: str | None, megatron_core: str, precision: str, fp8_recipe: str) -> str:
    """Why a Primus release (with its Megatron-LM's megatron-core) has no switch for a precision, or ""."""
    wanted = recipe(precision, fp8_recipe)
    if wanted in PRIMUS_SINCE:
        have, since = version_tuple((release or "").lstrip("v")), PRIMUS_SINCE[wanted]
        return "" if have is None or have >= since else f"Primus {release} ships no {wanted} config (from v{since[0]})"
    return megatron_core_lacks(megatron_core, precision, fp8_recipe)


def weight_copy_bytes(precision: str, fp8_recipe: str = DEFAULT_FP8_RECIPE) -> float:
    """Bytes per linear-layer parameter a precision keeps beyond BF16's (two quantized copies with their scales)."""
    wanted = recipe(precision, fp8_recipe)
    return 2 * _COPY_BYTES[wanted] if wanted else 0.0
