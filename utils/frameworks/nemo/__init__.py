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
    beside_megatron=(
        "NeMo and Megatron (mega, prim, mbridge): equal by construction are the model, layout, batch, optimizer, LR "
        "peak and decay, data and its sample order (Megatron's sequential sampler in all of them), the padded "
        "vocabulary, EOD loss masking (off), the init std (0.02), the NaN check (off), the FP8 recipe and the "
        "fairness profile's DDP settings. They cannot be equal: NeMo 2.3's CosineAnnealing warm-up (step k at LR x "
        "k/(W+1), where Megatron runs step k at (k-1)/W), NeMo's own weight initialisation order and RNG use (mega "
        "draws each weight per logical parameter, Megatron/Primus per rank), and NeMo's training loop (Lightning, "
        "its own data-module wrapping). So throughput compares, and loss curves agree in trend but not step for "
        "step; only the frameworks on Megatron-LM's loop can be expected to start from close losses for the same "
        "seed and data."),
)
