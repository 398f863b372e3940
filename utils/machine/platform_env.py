"""The process environment each platform's training runs need: the one place it is written down.

Every launcher exports these before torchrun, the Dockerfiles' documentation points here, and
train/train_mega.py fills in any that are missing and still take effect, so a torchrun started by
hand gets the same environment. A value already set in the environment wins (a user's deliberate
override stays visible in the result, which records the effective values). Standard library only.

    eval "$(python3 -m utils.machine.platform_env)"     # a run on this machine, started by hand
    python3 -m utils.machine.platform_env amd|nvd|cpu    # one platform's variables

Without a platform (or with `auto` or an empty one, as "$PLATFORM" is in a fresh shell) the platform
is resolved as the launcher resolves it (utils.config: PLATFORM from the environment or config.env,
else detected), and PLATFORM and GPUS_PER_NODE, which torchrun and the trainer need, are exported
too: `torchrun --nproc_per_node=$GPUS_PER_NODE train/train_mega.py ...` then runs as the launcher
would start it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import MutableMapping

from utils.config import ConfigError, load_config
from utils.frameworks import TABLE
from utils.spec import stacks

PLATFORM_ENV: dict[str, dict[str, str]] = {
    # The run environment Primus gives a Megatron run when the caller sets none, the same in v25.11
    # (examples/run_pretrain.sh at 66bed3ce, lines 148-315) and v26.5 (runner/helpers/envs/base_env.sh at ca7ddda3,
    # lines 143-238), so that mega, fsdp and autotp on AMD run with the environment prim runs with. The values that
    # differ between Primus releases (scratch reclaim, the CK attention backward kernel) are the stack's
    # (utils/spec/stacks.py, Stack.env).
    "amd": {
        # One hardware queue per stream: communication kernels are issued in program order, which Megatron's
        # sequence-parallel and gradient-reduce overlap rely on; two hardware queues per device.
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
        "GPU_MAX_HW_QUEUES": "2",
        # RCCL: collectives on high-priority streams, no argument checks, no MSCCL algorithms, no PXN, and no
        # tensor registration through the caching allocator's hook.
        "TORCH_NCCL_HIGH_PRIORITY": "1",
        "NCCL_CHECKS_DISABLE": "1",
        "RCCL_MSCCL_ENABLE": "0",
        "NCCL_PXN_DISABLE": "1",
        "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK": "0",
        # Transformer Engine (ROCm): FP8 cast-transpose through its Triton kernel, and MXFP8 switched on: both Primus
        # releases export it for every run, and Primus's ROCm argument check refuses the mxfp8 recipe without it
        # (utils/upstream/table.py: primus-v26.5 "MXFP8 switch", "MXFP8 refused without it").
        "NVTE_USE_CAST_TRANSPOSE_TRITON": "1",
        "NVTE_ROCM_ENABLE_MXFP8": "1",
    },
    "nvd": {
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
        # Transformer Engine attention backends: flash attention and cuDNN fused attention both allowed,
        # TE picks per shape (written out so that a run with one switched off says so in its result).
        "NVTE_FLASH_ATTN": "1",
        "NVTE_FUSED_ATTN": "1",
    },
    "cpu": {
        # glibc: serve large tensors from the heap and keep freed memory in the process, as a GPU
        # allocator caches device memory. Otherwise every step maps and unmaps its big activations
        # and logits, which costs about a fifth of a tiny model's CPU step in page faults.
        "GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=4294967296",
        # One compute thread per worker process, however the workers are spread over nodes. torchrun
        # sets this only when a node runs several workers, so a two-node run (one worker per node)
        # would compute on every core, and a kernel may split its sums by thread count: the same
        # run's last digits would then depend on where its workers happen to run.
        "OMP_NUM_THREADS": "1",
    },
}
# Read once when a process starts: only an environment exported before the launch can set these.
AT_PROCESS_START = frozenset({"GLIBC_TUNABLES", "OMP_NUM_THREADS"})


def platform_env(platform: str, framework: str = "", stack: str = "") -> dict[str, str]:
    """The variables a platform's training processes need (a copy), with the stack's (utils/spec/stacks.py; "": the
    platform's default) and those of the framework when one is named."""
    if platform not in PLATFORM_ENV:
        raise ValueError(f"unknown platform {platform!r}; valid: {', '.join(PLATFORM_ENV)}")
    row = stacks.get(stack) if stack else stacks.default(platform)
    return {**PLATFORM_ENV[platform], **row.env, **(TABLE[framework].env.get(platform, {}) if framework else {})}


def apply(platform: str, environ: MutableMapping[str, str] | None = None, framework: str = "",
          stack: str = "") -> dict[str, str]:
    """Set the platform's (and stack's and framework's) variables that are not set yet and can still take effect;
    return the effective values (a variable read at process start that the launch did not export is left out)."""
    environ = os.environ if environ is None else environ
    wanted = platform_env(platform, framework, stack)
    for key, value in wanted.items():
        if key not in AT_PROCESS_START:
            environ.setdefault(key, value)
    return {key: environ[key] for key in wanted if key in environ}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m utils.machine.platform_env", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("platform", nargs="?", default="auto", choices=["auto", "", *PLATFORM_ENV],
                        metavar="PLATFORM",
                        help="amd, nvd or cpu; none, auto or empty: this machine's, as the launcher resolves it")
    args = parser.parse_args(argv)
    exports: dict[str, str] = {}
    if args.platform in ("auto", ""):  # as the launcher resolves it, with what torchrun needs of it
        try:
            cfg = load_config()
        except ConfigError as err:
            err.report("utils.machine.platform_env")
            return 2
        exports = {"PLATFORM": cfg.platform, "GPUS_PER_NODE": str(cfg["GPUS_PER_NODE"])}
        stack = cfg.stack.name
    else:
        stack = os.environ.get("STACK", "") if os.environ.get("STACK", "") in stacks.TABLE else ""
    platform = exports.get("PLATFORM", args.platform)
    if stack and stacks.get(stack).platform != platform:
        stack = ""
    exports.update({key: os.environ.get(key, value) for key, value in platform_env(platform, stack=stack).items()})
    for key, value in exports.items():
        print(f"export {key}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
