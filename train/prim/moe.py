"""A mixture-of-experts model in a Primus experiment (train/prim/config.py writes these under the overrides): its
experts and routing in Megatron-LM's argument names, and what Primus's shipped Qwen3 30B-A3B experiments
(examples/megatron/configs/{MI300X,MI355X}/qwen3_30B_A3B-{BF16,FP8}-pretrain.yaml) turn on that changes what the
experts compute, turned off.

The experts and routing are utils.spec.fairness.moe_settings(spec.moe), each written whatever the release's presets
say: v25.11's route with the allgather dispatcher, without the grouped GEMM or the fused permutation (its
qwen2.5_base.yaml, which qwen3_30B_A3B.yaml extends, sets none of them, so language_model.yaml's defaults apply), and
both releases' with no load-balancing loss (language_model.yaml's moe_aux_loss_coeff 0.0; Qwen3's is 0.001):
utils/upstream/primus_facts.py. The names are those of Megatron-LM's argument dump, which reads them back
(utils/frameworks/megatron_log.py, MOE_ARGUMENTS).
"""

from __future__ import annotations

from utils.frameworks.megatron_log import MOE_ARGUMENTS
from utils.spec.fairness import moe_settings
from utils.spec.models import ModelSpec

ARGUMENT = {core: name for name, core in MOE_ARGUMENTS.items()}  # megatron-core's name -> Megatron-LM's argument
# Off in every profile: the shipped experiments turn them on, and each changes the experts' work.
ROUTING_OFF = {
    # Their "# debug" switch: megatron-core's router routes on random logits instead of its own (router.py in both
    # releases' Megatron-LM), so the experts' load is balanced by construction and the router learns nothing.
    "moe_router_force_load_balancing": False,
    # megatron-core's legacy GroupedMLP (the MI355X files; Primus's sync-free stages 2 and 3 use it): mega and every
    # other Megatron path run Transformer Engine's grouped GEMM layer, which this off selects.
    "moe_use_legacy_grouped_gemm": False,
}


def overrides(spec: ModelSpec) -> dict:
    """The experts and their routing in Megatron-LM's argument names ({} for a dense model)."""
    if spec.moe is None:
        return {}
    return {**{ARGUMENT[name]: value for name, value in moe_settings(spec.moe).items()}, **ROUTING_OFF}
