"""nemo: NVIDIA's NeMo 2.0 recipes (train/nemo/: the recipe mapping, its launch and step timer), NVIDIA only.

Its LR warm-up is NeMo's own cosine annealing (it cannot be changed: utils/spec/fairness.py); its result is extracted
from its log. Each model it trains is one of NeMo's recipes (nemo.collections.llm.recipes.<name>).
"""

from utils.frameworks import Framework

FRAMEWORK = Framework(
    name="nemo", display_name="NeMo", platforms=("nvd",), warmup_convention="nemo-cosine-annealing",
    probe_modules=("transformer_engine", "megatron.core", "nemo"), command="train.nemo.launch:command",
    # NeMo 2.3's precision plugins (train/nemo/recipe.py PRECISION_PLUGINS): no FP4 there, no blockwise in its
    # megatron-core 0.12
    log_format="utils.frameworks.nemo.log_format:FORMAT", precisions=("bf16", "fp8", "mxfp8"),
    fp8_recipes=("delayed", "tensorwise"),
    precision_api="megatron-core",
    model_names={"llama": "llama31_8b", "qwen": "qwen25_7b", "llama70b": "llama31_70b", "mistral": "mistral_7b",
                 "llama32": "llama32_3b"},
    transformer_impls=("transformer_engine",),
)
