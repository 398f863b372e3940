"""mega: megatron-core driven by TPrimat's own trainer (train/train_mega.py, train/mega/), on both vendors and the
CPU."""

from utils.frameworks import Framework
from utils.spec.models import FEATURES

FRAMEWORK = Framework(
    name="mega", display_name="Megatron", platforms=("amd", "nvd", "cpu"), warmup_convention="megatron",
    probe_modules=("transformer_engine", "megatron.core"), trainer="train/train_mega.py",
    log_format="utils.frameworks.megatron_log:FORMAT",  # its trainer prints Megatron-LM's lines
    # Transformer Engine's recipes through TransformerConfig (train/mega/model.py); no MXFP4: megatron-core has none
    precisions=("bf16", "fp8", "mxfp8", "nvfp4", "fp32"), fp8_recipes=("delayed", "tensorwise", "blockwise"), precision_api="megatron-core",
    transformer_impls=("transformer_engine", "local"), baseline=True,
    builds_moe=True,  # megatron-core's MoE layer (train/mega/model.py)
    features=frozenset(FEATURES),  # every one through TransformerConfig's fields (train/mega/model.py)
    expert_parallel=True,  # EP as megatron-core's expert_model_parallel_size (train/mega/trainer.py, model.py)
)
