"""mbridge: NVIDIA's Megatron-Bridge pretrain recipes (train/mbridge/: the recipe mapping, its launch and read-back).

Megatron-Bridge succeeded the NeMo 2 LLM recipes on NVIDIA's 26.x images; `nemo` stays for the 25.x rows. Its
training loop is Megatron-LM's (megatron.bridge.training.train, its iteration line is Megatron-LM's), so its LR
warm-up is Megatron's and its log format is Megatron-LM's (utils/frameworks/megatron_log.py); its result is
extracted from that log. Each model it trains is one of its recipe functions,
`megatron.bridge.recipes.<module>.<function>` (v0.6.0: src/megatron/bridge/recipes/llama/__init__.py,
.../qwen/__init__.py); it has none for Mistral 7B. NVIDIA only: on AMD, Megatron-Bridge runs as Primus's
`megatron_bridge` backend, and Primus v26.5 (release/v26.5, ca7ddda3) ships no pretrain experiment for a TPrimat
model there (its primus/configs/models/megatron_bridge/ presets are Llama 3 8B and Llama 3.1 70B finetunes, Qwen 3
and Mamba; examples/megatron_bridge/configs/MI300X, MI355X pretrain mamba_130M, qwen3_8b and qwen3_32b). A release
that ships one adds "amd" here and its experiment to train/prim/.

On the CPU it runs on request only (FRAMEWORK=mbridge; FRAMEWORK=all leaves it out): its pins are not the host's,
so its run starts in a Python 3.12 environment of its own built on first use (train/mbridge/environment.py), and
Megatron-Bridge's own pretrain() trains there over gloo with megatron-core's local layers, its few GPU-only steps
stood in for (train/mbridge/cpu_stand_ins.py).
"""

from utils.frameworks import Framework

FRAMEWORK = Framework(
    name="mbridge", display_name="Megatron-Bridge", platforms=("nvd",), on_request=("cpu",),
    warmup_convention="megatron",
    stops_at_target=False,  # Megatron-LM's loop has no switch to end at a validation loss
    probe_modules=("transformer_engine", "megatron.core", "megatron.bridge"), command="train.mbridge.launch:command",
    probe_context="train.mbridge.te_stand_in:standing_in", environment="train.mbridge.environment:environment",
    # Its mixed-precision presets (train/mbridge/recipe.py PRESETS); no MXFP4: megatron-core has none; fp32 where
    # a CPU has no bf16 instructions (PRECISION=fp32 is the CPU's only)
    log_format="utils.frameworks.megatron_log:FORMAT", precisions=("bf16", "fp8", "mxfp8", "nvfp4", "fp32"),
    fp8_recipes=("delayed", "tensorwise", "blockwise"), precision_api="megatron-core",
    model_names={"llama": "llama.llama31_8b_pretrain_config", "qwen": "qwen.qwen25_7b_pretrain_config",
                 "llama70b": "llama.llama31_70b_pretrain_config", "llama32": "llama.llama32_3b_pretrain_config",
                 "qwen3moe": "qwen.qwen3_30b_a3b_pretrain_config", "gptoss": "gpt_oss.gpt_oss_20b_pretrain_config"},
    transformer_impls=("transformer_engine", "local"),
    expert_parallel=True,  # its provider's expert_model_parallel_size (train/mbridge/recipe.py), read back from it
)
