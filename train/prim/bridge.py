"""Primus's own Megatron-Bridge backend (`framework: megatron_bridge`) on AMD: where a release has a pretrain
experiment for a TPrimat model, and why a run is skipped where it has none.

Primus v26.5 (release/v26.5, ca7ddda3) has none for any TPrimat model: its megatron_bridge model presets
(primus/configs/models/megatron_bridge/) are Llama 3 8B (llama3_8b.yaml) and Llama 3.1 70B (llama31_70b.yaml),
both finetune flavors, Qwen 3 and Mamba; its pretrain experiments (examples/megatron_bridge/configs/MI300X/,
MI355X/) are mamba_130M, qwen3_8b and qwen3_32b. v25.11 has no megatron_bridge backend. A release that ships one
names it in its row's `bridge_pretrain` (train/prim/releases.py), and its launch is built then, from that file.
"""

from __future__ import annotations

from train.prim import releases
from utils.spec.request import Request

CHECKED = "primus/configs/models/megatron_bridge/ and examples/megatron_bridge/configs/"


def skip_reason(req: Request) -> str | None:
    """Why Primus's megatron_bridge backend cannot pretrain the request's model on its stack's release; None where
    the release ships a pretrain experiment for it."""
    release = releases.of(req.stack.primus)
    if req.identity.model in release.bridge_pretrain:
        return None
    return (f"Primus {release.name} has no megatron_bridge pretrain experiment for {req.identity.model} "
            f"(checked {CHECKED})")
