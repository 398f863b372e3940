"""prim: AMD Primus's own launcher and Megatron-LM (train/prim/: the experiment YAML, its launch), AMD only.

Each model it trains is one of Primus's shipped experiment configs under examples/megatron/configs/ (MI300X/, else
MI355X/: train/prim/config.py), tried in order with {precision} as BF16 or FP8; its result is extracted from its log.
"""

from utils.frameworks import Framework

FRAMEWORK = Framework(
    name="prim", display_name="Primus", platforms=("amd",), warmup_convention="megatron",
    stops_at_target=False,  # Megatron-LM's loop has no switch to end at a validation loss
    probe_modules=("transformer_engine",), command="train.prim.launch:command",
    log_format="utils.frameworks.prim.log_format:FORMAT",
    in_this_python=False, fixed=("primus",), stack_check="utils.frameworks.prim.checkout:stack_check",
    # Primus's Megatron-LM arguments (train/prim/config.py): its MI355X configs ship MXFP8 (fp8_recipe mxfp8) and
    # MXFP4 (fp4_recipe mxfp4, Primus's own); FP8 is its delayed recipe, built by Primus itself (fairness.FIXED)
    precisions=("bf16", "fp8", "mxfp8", "mxfp4"), fp8_recipes=("delayed",), precision_api="primus",
    model_names={
        "llama": ("llama3.1_8B-{precision}-pretrain.yaml", "llama3.1_8B-pretrain.yaml"),
        "qwen": ("qwen2.5_7B-{precision}-pretrain.yaml", "qwen2.5_7B-pretrain.yaml"),
        "llama70b": ("llama3.1_70B-{precision}-pretrain.yaml", "llama3.1_70B-pretrain.yaml"),
        "qwen3moe": ("qwen3_30B_A3B-{precision}-pretrain.yaml",),  # v26.5 under MI300X/ and MI355X/, v25.11 MI355X/
    },
    # AMD-AGI/Primus ca7ddda3: primus/configs/models/megatron/gpt_oss_20B.yaml extends deepseek_v2_base.yaml (a
    # 2880-wide shared expert, seq_aux_loss, QK layernorm, no sinks, biases or clamp); examples/megatron/configs/MI355X/
    # gpt_oss_20B-FP8-mlperf-pretrain.yaml lines 19-33 train SwiGLU and plain RoPE on Llama 3's tokenizer
    no_model={"mistral": "Primus ships no Mistral 7B experiment, only Mixtral's",
              "gptoss": "Primus's shipped gpt_oss_20B experiments build another model: their preset extends "
                        "DeepSeek-V2's, with a shared expert and no attention sinks, biases or clamped SwiGLU, and the "
                        "MLPerf one trains plain SwiGLU and RoPE"},
    transformer_impls=("transformer_engine",),
    expert_parallel=True,  # Megatron-LM's expert_model_parallel_size (train/prim/config.py), in its argument dump
)
