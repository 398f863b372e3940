"""autotp: Hugging Face models on DeepSpeed AutoTP with ZeRO 0-2 (train/train_autotp.py, train/autotp/engine.py),
with Megatron-LM's LR schedule implemented by TPrimat; runs unchanged on both vendors and the CPU. No FP8 path, no
torch.compile, no activation checkpointing."""

from utils.frameworks import Framework

FRAMEWORK = Framework(
    name="autotp", display_name="DeepSpeed AutoTP", platforms=("amd", "nvd", "cpu"), warmup_convention="megatron",
    probe_modules=("transformers", "deepspeed", "megatron.core"), trainer="train/train_autotp.py",
    memory_model="deepspeed", parallelisms=frozenset({"tp"}), precisions=("bf16", "fp32"),
    knobs=("ATTN_IMPL", "ZERO_STAGE"), environment="train.autotp.environment:environment",
    features=frozenset({"sliding_window"}),  # Hugging Face's Mistral (train/common/hf_config.py)
    env={"amd": {"DISABLE_ADDMM_HIP_LT": "0", "DS_ACCELERATOR": "cuda"},  # ROCm torch reports itself as cuda
         "nvd": {"DS_ACCELERATOR": "cuda"},
         # DeepSpeed picks its accelerator by probing, and without a GPU it would look for Intel's extension
         # first: the CPU accelerator (gloo) is named, so a run never depends on what happens to be installed.
         "cpu": {"DS_ACCELERATOR": "cpu"}},
)
