"""fsdp: Hugging Face models on plain PyTorch, FSDP2 + DTensor tensor parallelism or DDP (train/train_fsdp.py,
train/native/), with Megatron-LM's LR schedule implemented by TPrimat; runs unchanged on both vendors and the CPU."""

from utils.frameworks import Framework

FRAMEWORK = Framework(
    name="fsdp", display_name="torch FSDP", platforms=("amd", "nvd", "cpu"), warmup_convention="megatron",
    probe_modules=("transformers", "megatron.core"),  # the torch-native trainers read data through megatron.core
    trainer="train/train_fsdp.py", memory_model="fsdp2", parallelisms=frozenset({"tp"}),
    # torchao's float8 training with its "tensorwise" recipe (current scaling); no delayed scaling (torchao removed
    # it), no block-scaled formats wired
    precisions=("bf16", "fp8", "fp32"), fp8_recipes=("tensorwise",),
    knobs=("DATA_PARALLEL", "COMPILE", "COMPILE_MODE", "SAC_FREQ", "ATTN_IMPL"),
    # torch's addmm takes hipBLASLt on ROCm only while DISABLE_ADDMM_HIP_LT is 0 (the torch-native benchmark
    # TPrimat follows needed it set so on MI300X).
    env={"amd": {"DISABLE_ADDMM_HIP_LT": "0"}},
    # Hugging Face's MoE layers with megatron-core's load-balancing loss and an fp32 router (train/native/moe.py);
    # expert parallelism 1: each rank holds every expert (FSDP2 shards their weights over DP as any other)
    builds_moe=True,
    features=frozenset({"sliding_window"}),  # Hugging Face's Mistral (train/common/hf_config.py)
    no_expert_parallel=("Hugging Face's MoE modules under FSDP2 hold every expert on each rank (train/native/moe.py "
                        "has no expert-parallel split); EP=1 runs it"),
    moe_tp_refusal=("Hugging Face's experts are one 3-D tensor per layer, which the tensor-parallel plan "
                    "(train/native/tensor_parallel.py) does not split"),
    # Sequence parallelism (train/native/tensor_parallel.py) shards the sequence between the layers' projections.
    tp_refuses={
        "ATTN_IMPL": ("eager", "Hugging Face builds eager attention's mask from the sequence-sharded embedding "
                               "output, which would be wrong; ATTN_IMPL=sdpa runs it"),
        # measured on the CPU with torch 2.15: step 1's grad norm 1.93, uncompiled and at TP=1 2.19; not yet
        # measured on a GPU
        "COMPILE": (True, "torch.compile computes wrong gradients for a decoder layer under sequence parallelism "
                          "(torch 2.15, measured on the CPU); COMPILE=0 runs it"),
    },
)
