"""torchtitan: PyTorch's own pretraining framework (PyPI torchtitan 0.3.0, requirements/torchtitan.txt) under its own
entry point `torchtitan.train`, configured by TPrimat's config function (train/torchtitan/): the reference that fsdp
must not be slower than on one layout.

It builds each dense model of utils.spec.models from the spec as torchtitan's llama3 model (Qwen 2.5's QKV bias as
a bias on its fused QKV projection; no sliding window, so Mistral skips it), Qwen3 30B-A3B as its qwen3 MoE model
with megatron-core's load-balancing loss added (train/torchtitan/moe.py), GPT-OSS-20B as its gpt_oss model with
every feature of the spec (train/torchtitan/gpt_oss.py; GPUs only: its attention sinks need FlexAttention's or flash
attention's log-sum-exp), each MoE at TP=1 with its experts split over EP of the FSDP ranks, and reads TPrimat's
prepared data through TPrimat's dataloader component. On the CPU it runs only when
FRAMEWORK names it (`on_request`: not in the CPU's default run set), from an environment of its own built on first
use (`environment`: train/torchtitan/environment.py), through torchtitan's own loop with stand-ins for what needs a
GPU (train/torchtitan/cpu_stand_ins.py, docs/frameworks.md "torchtitan"), in fp32 with SDPA attention. Its LR
warm-up is torchtitan's own (step k at LR x k/W), its result is extracted from its log: torchtitan's metrics line
and TPrimat's TPRIMAT_STEP line (device-synchronised step time, every rank's peak memory).

torchtitan has pipeline parallelism too; TPrimat does not map it yet (the fsdp memory model has no pipeline stages),
so a PP > 1 layout skips it. Its selective activation checkpointing is per operation on every layer, not SAC_FREQ's
every N-th layer, and its compile has no mode: SAC_FREQ skips it, COMPILE_MODE other than default is refused.
"""

from utils.frameworks import Framework
from utils.spec.models import ENTRIES


def model_name(spec) -> str | None:
    """torchtitan's model TPrimat builds a spec as (train/torchtitan/config_registry.py): its gpt_oss model for
    GPT-OSS (train/torchtitan/gpt_oss.py), its llama3 model for a dense one without QK-norm, its qwen3 MoE model for
    Qwen3's mixture of experts (train/torchtitan/moe.py); only gpt_oss has a sliding window (Mistral 7B skips it)."""
    if spec.hf_family == "gpt_oss":
        return "gpt_oss"
    if spec.sliding_window is not None:
        return None
    if spec.moe is not None:
        return "qwen3" if spec.hf_family == "qwen3_moe" else None
    return None if spec.qk_norm else "llama3"


MODEL_NAMES = {spec.key: name for spec, _ in ENTRIES if (name := model_name(spec))}

FRAMEWORK = Framework(
    name="torchtitan", display_name="torchtitan", platforms=("amd", "nvd"), on_request=("cpu",),
    warmup_convention="torchtitan",
    # torchtitan's entry point, which the run starts (it imports the trainer and its distributed pieces), and
    # megatron.core, through which TPrimat's dataloader reads data
    probe_modules=("torchtitan.train", "megatron.core"),
    command="train.torchtitan.launch:command", log_format="utils.frameworks.torchtitan.log_format:FORMAT",
    memory_model="fsdp2", environment="train.torchtitan.environment:environment",
    # its train_step reduce-scatters every microbatch (no set_requires_gradient_sync(False) but the chunked loss's
    # LM head: torchtitan/components/loss.py lines 731-771)
    synced_microbatches=True,
    parallelisms=frozenset({"tp"}), precisions=("bf16", "fp32"), knobs=("DATA_PARALLEL", "COMPILE"),
    model_names=MODEL_NAMES,
    builds_moe=True,  # Qwen3 30B-A3B and GPT-OSS-20B as its qwen3 and gpt_oss models (train/torchtitan/)
    # its ParallelismConfig.expert_parallel_degree, the EP ranks taken from FSDP's (train/torchtitan/settings.py)
    expert_parallel=True,
    moe_tp_refusal=("at TP > 1 torchtitan routes the TP group's tokens as DTensors, onto which the load-balancing "
                    "loss TPrimat adds to Qwen3's routers (megatron-core's, on each rank's own tokens; torchtitan has "
                    "none) is not mapped, and GPT-OSS's TP split (its sinks over heads, its expert biases scaled by "
                    "1/TP) is not checked here"),
    env={"amd": {"DISABLE_ADDMM_HIP_LT": "0"}},  # as fsdp's: the same torch on the same GPUs
    # utils/upstream/table.py: torchtitan-0.3.0-mesh-dims, torchtitan-0.3.0-block-mask, torch-2.13-mesh-dims
    torch_floor=("2.13", "torchtitan 0.3.0 imports torch.distributed.fsdp.DataParallelMeshDims and calls "
                         "create_block_mask(separate_full_blocks=...), both new in torch 2.13"),
)
