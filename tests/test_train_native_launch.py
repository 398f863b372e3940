"""The torch-native frameworks (fsdp, autotp) from the shell: their exact commands and vendor environment in dry
runs on faked AMD and NVIDIA nodes, a pipeline layout skipped and counted, and the compatibility rules refusing a
bad combination before anything starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.fixtures.train_matrix.shell import machine, read, run_dirs
from tests.shell_harness import REPO

GPUS = {"nvd": {"nvidia": 8}, "amd": {"amd": 8}}
STACKS = {"nvd": "nemo-26.08", "amd": "primus-v26.5"}  # the rows whose environments VENDOR_ENV writes out
# What each launch sets on top of the inherited environment: the platform's variables (utils/machine/platform_env), the
# framework's, and unbuffered Python.
VENDOR_ENV = {
    ("nvd", "fsdp"): {**(NEMO_26_08 := {  # the platform's, and what Megatron-Bridge's recipes run with (issue 43)
        "CUDA_DEVICE_MAX_CONNECTIONS": "1", "NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "1",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "NCCL_NVLS_ENABLE": "0", "NCCL_GRAPH_REGISTER": "0",
        "TORCH_NCCL_AVOID_RECORD_STREAMS": "1", "TORCH_NCCL_HIGH_PRIORITY": "1"})},
    ("nvd", "autotp"): {**NEMO_26_08, "DS_ACCELERATOR": "cuda"},
    ("amd", "fsdp"): {**(PRIMUS_V26_5 := {  # what Primus v26.5 runs with, whatever the framework (issue 32)
        "CUDA_DEVICE_MAX_CONNECTIONS": "1", "GPU_MAX_HW_QUEUES": "2", "TORCH_NCCL_HIGH_PRIORITY": "1",
        "NCCL_CHECKS_DISABLE": "1", "RCCL_MSCCL_ENABLE": "0", "NCCL_PXN_DISABLE": "1",
        "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK": "0", "NVTE_USE_CAST_TRANSPOSE_TRITON": "1",
        "NVTE_ROCM_ENABLE_MXFP8": "1",
        "HSA_NO_SCRATCH_RECLAIM": "1", "NVTE_CK_USES_BWD_V3": "1", "NVTE_CK_IS_V3_ATOMIC_FP32": "1"}),
        "DISABLE_ADDMM_HIP_LT": "0"},
    ("amd", "autotp"): {**PRIMUS_V26_5, "DISABLE_ADDMM_HIP_LT": "0", "DS_ACCELERATOR": "cuda"},
}


@pytest.mark.parametrize("platform", ["nvd", "amd"])
def test_a_dry_run_shows_the_exact_commands_and_vendor_environment_and_skips_the_pipeline_layout(tmp_path, platform):
    fake = machine(tmp_path, **GPUS[platform])
    result = fake.run("shell/train.sh", DRY_RUN="1", FRAMEWORK="fsdp,autotp", STRATEGY="balanced",
                      STACK=STACKS[platform])
    assert result.returncode == 0, result.output
    dirs = {d.name: d for d in run_dirs(tmp_path / "output")}
    assert sorted(dirs) == ["autotp-llama-balanced", "fsdp-llama-balanced"]  # Qwen's balanced layout is PP2
    for framework in ("fsdp", "autotp"):
        run_dir = dirs[f"{framework}-llama-balanced"]
        launch = read(run_dir / "launch.json")
        assert launch["command"] == [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=8",
                                     "--standalone", "--nnodes=1", f"train/train_{framework}.py",
                                     "--request", f"{run_dir}/config.json", "--run-dir", str(run_dir)]
        assert launch["env"] == {**VENDOR_ENV[(platform, framework)], "PYTHONUNBUFFERED": "1"}
        assert f"command: {launch['shell']}" in result.stdout
        assert read(run_dir / "config.json")["parallelism"]["tp"] == 2
    for framework in ("fsdp", "autotp"):
        reason = f"{framework} has no pipeline parallelism (PP=2); the other frameworks run this layout"
        assert f"{framework}-qwen-balanced skipped: {reason}" in result.stderr  # as the matrix passes it
        (line,) = [line for line in result.stdout.splitlines() if line.startswith(f"{framework}-qwen-balanced ")]
        assert line.split()[1] == "skipped" and reason in line  # and in the summary
    assert "2 run(s), 2 ok, 0 not ok, 2 skipped" in result.stdout
    assert "Transformer Engine and Apex" not in result.output  # the CPU platform's line (utils/missing_stacks.py)


def test_a_single_run_of_a_pipeline_layout_is_refused_in_one_line(tmp_path):
    fake = machine(tmp_path, nvidia=8)
    result = fake.run("train/train_nvd_autotp_qwen.sh", DRY_RUN="1", STRATEGY="balanced")
    assert result.returncode == 2, result.output
    assert result.stderr.splitlines() == ["[tprimat] error: autotp has no pipeline parallelism (PP=2); the other "
                                          "frameworks run this layout; choose another STRATEGY (or TP, PP, DP, GA) "
                                          "or FRAMEWORK"]
    assert run_dirs(tmp_path / "output") == []


# One line per rule, as utils/config/native.py words it (the node: faked, with the platform's GPUs).
RULES = [
    ("nvd", {"COMPILE": "1", "PRECISION": "fp8"}, "COMPILE=1 with PRECISION=fp8: torch.compile and FP8 do not go "
     "together in the torch-native frameworks; set COMPILE=0 or PRECISION=bf16"),
    ("nvd", {"SAC_FREQ": "1/4", "PRECISION": "fp8", "FRAMEWORK": "fsdp"}, "SAC_FREQ=1/4 with PRECISION=fp8: "
     "selective activation checkpointing and FP8 do not go together; clear SAC_FREQ or set PRECISION=bf16"),
    ("nvd", {"SAC_FREQ": "1/4", "DATA_PARALLEL": "ddp", "FRAMEWORK": "fsdp"}, "SAC_FREQ=1/4: selective activation "
     "checkpointing runs only under FSDP (framework fsdp with DATA_PARALLEL=fsdp), and DATA_PARALLEL=ddp; clear "
     "SAC_FREQ or set DATA_PARALLEL=fsdp"),
    ("nvd", {"DATA_PARALLEL": "ddp", "TP": "2", "DP": "4", "GA": "16", "FRAMEWORK": "fsdp", "STRATEGY": ""},
     "DATA_PARALLEL=ddp: DDP replicates whole models, and a layout asks for TP=2; use DATA_PARALLEL=fsdp "
     "(FSDP2 + DTensor TP) or TP=1"),
    ("cpu", {"ATTN_IMPL": "flash_attention_2"}, "ATTN_IMPL=flash_attention_2: flash attention needs a GPU (the "
     "flash-attn package); use sdpa or eager on the CPU"),
    ("nvd", {"ZERO_STAGE": "0", "FRAMEWORK": "autotp", "STRATEGY": "balanced"}, "ZERO_STAGE=0 with PRECISION=bf16: "
     "DeepSpeed's bf16 optimizer without ZeRO gets AutoTP's gradient norm wrong, and a layout asks for TP=2; set "
     "ZERO_STAGE=1 or 2"),
]
RULE_IDS = ["compile-fp8", "sac-fp8", "sac-ddp", "ddp-tp", "flash-cpu", "zero0-bf16-tp"]


@pytest.mark.parametrize("platform, knobs, line", RULES, ids=RULE_IDS)
def test_the_configuration_check_refuses_a_bad_combination_in_one_line(tmp_path, platform, knobs, line):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TPRIMAT_DETECTED_PLATFORM": platform,
           "TPRIMAT_DETECTED_GPUS": "8" if platform != "cpu" else "0", **knobs}
    out = subprocess.run([sys.executable, "-m", "utils.config", "check"], cwd=REPO, env=env, capture_output=True,
                         text=True)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines()[0] == f"config error: {line}"
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("platform, knobs, line", RULES[::2] + RULES[3:4], ids=RULE_IDS[::2] + RULE_IDS[3:4])
def test_run_train_refuses_a_bad_combination_before_anything_starts(tmp_path, platform, knobs, line):
    fake = machine(tmp_path, **GPUS.get(platform, {}))
    result = fake.run("shell/run_train.sh", **knobs)
    assert result.returncode == 2, result.output
    errors = [text for text in result.stderr.splitlines() if "error" in text]
    assert len(errors) == 1 and errors[0].endswith(line), result.stderr
    assert "Traceback" not in result.output and not (tmp_path / "output").exists()
    assert result.calls_of("docker", "run") == []
