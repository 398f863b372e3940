"""prim: AMD Primus's own launcher and Megatron-LM (train/prim/: the experiment YAML, its launch), AMD only.

Each model it trains is one of Primus's shipped experiment configs under examples/megatron/configs/, tried in
order with {precision} as BF16 or FP8; its result is extracted from its log.
"""

from utils.frameworks import Framework

FRAMEWORK = Framework(
    name="prim", display_name="Primus", platforms=("amd",), warmup_convention="megatron",
    probe_modules=("transformer_engine",), command="train.prim.launch:command", log_format="prim",
    in_this_python=False, precisions=("bf16", "fp8"), fixed=("primus",),
    model_names={
        "llama": ("llama3.1_8B-{precision}-pretrain.yaml", "llama3.1_8B-pretrain.yaml"),
        "qwen": ("qwen2.5_7B-{precision}-pretrain.yaml", "qwen2.5_7B-pretrain.yaml"),
        "llama70b": ("llama3.1_70B-{precision}-pretrain.yaml", "llama3.1_70B-pretrain.yaml"),
    },
)
