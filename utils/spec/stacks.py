"""The stack table: each software stack TPrimat runs on is one row, and STACK chooses a row per platform.

A stack is what a vendor ships in one image (its ROCm or CUDA, torch, Transformer Engine, megatron-core and its
own framework: Primus, NeMo or Megatron-Bridge), plus the frameworks TPrimat runs on it. The image is the base that
<platform>.Dockerfile builds FROM; the result records the stack's name and the image's digest, so two runs of one
vendor on two stacks compare like two vendors do. The newest row of a platform is its default; the older rows stay
selectable so that a stack upgrade is measured against the last one. The CPU's stack is the host's .venv
(requirements/host.txt), not an image.

Adding a stack is one row here (docs/ARCHITECTURE.md, "Where new things go"). Standard library only: utils.config
reads it before any environment exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping


@dataclass(frozen=True)
class Stack:
    name: str  # STACK's value, e.g. "primus-v26.5"
    platform: str  # amd | nvd | cpu
    image: str | None  # the base image <platform>.Dockerfile builds FROM; None: the host's .venv (CPU)
    released: str  # the image's date, YYYY-MM (or the host pins' date)
    runtime: str  # the accelerator runtime it carries, e.g. "ROCm 7.1" or "CUDA 12.9"; "" on the CPU
    torch: str
    transformer_engine: str  # "" where it carries none
    megatron_core: str  # as its Megatron code reports it (a Megatron-LM checkout's own version on Primus)
    frameworks: tuple[str, ...]  # the utils.frameworks entries that run on it, in the run list's order
    primus: str | None = None  # the Primus release in the image (AMD); it decides how prim launches
    nemo: str | None = None  # NeMo's version in the image (NVIDIA's NeMo 2 recipes)
    megatron_bridge: str | None = None  # Megatron-Bridge's version in the image
    source: str = ""  # where these facts were read


ROWS = (
    Stack(name="primus-v26.5", platform="amd", image="rocm/primus:v26.5", released="2026-07",
          runtime="ROCm 7.2", torch="2.12", transformer_engine="2.15.0.dev0", megatron_core="0.16",
          frameworks=("mega", "prim", "fsdp", "autotp"), primus="v26.5",
          source="Primus release/v26.5 docs and image notes"),
    Stack(name="primus-v25.11", platform="amd", image="rocm/primus:v25.11", released="2025-11",
          runtime="ROCm 7.1", torch="2.9", transformer_engine="2.4", megatron_core="0.15.0rc8",
          frameworks=("mega", "prim", "fsdp", "autotp"), primus="v25.11",
          source="Primus clairlee/release/v25.11 (commit 66bed3ce), its third_party/Megatron-LM 847781764"),
    Stack(name="nemo-25.04", platform="nvd", image="nvcr.io/nvidia/nemo:25.04", released="2025-04",
          runtime="CUDA 12.8", torch="2.7", transformer_engine="2.2", megatron_core="0.12",
          frameworks=("mega", "nemo", "fsdp", "autotp"), nemo="2.3.0",
          source="NeMo Framework 25.04 release notes"),
    Stack(name="host", platform="cpu", image=None, released="2026-11", runtime="", torch="2.15.0",
          transformer_engine="", megatron_core="0.19.2", frameworks=("mega", "fsdp", "autotp"),
          source="requirements/host.txt"),
)

TABLE: Mapping[str, Stack] = MappingProxyType({row.name: row for row in ROWS})
NAMES = tuple(TABLE)


def of(platform: str) -> tuple[Stack, ...]:
    """A platform's stacks, newest first (the first is its default)."""
    return tuple(row for row in ROWS if row.platform == platform)


def default(platform: str) -> Stack:
    """A platform's newest stack."""
    return of(platform)[0]


def get(name: str) -> Stack:
    return TABLE[name]
