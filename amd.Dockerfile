# TPrimat on AMD GPUs, FROM the chosen stack's Primus image (utils/spec/stacks.py: ROCm, PyTorch,
# Transformer Engine, hipBLASLt, RCCL, Primus at /workspace/Primus with its own Megatron-LM).
# BASE_IMAGE has no default: the stack table is its one source, and the build (shell/lib/docker.sh,
# ./shell/build.sh) passes the STACK row's image. By hand: eval "$(python3 -m utils.config stack amd)"
# && docker build --build-arg BASE_IMAGE="${STACK_IMAGE}" --file amd.Dockerfile . The repository is
# mounted at run time; no secret is ever copied in (HF_TOKEN arrives with --env-file at run time).
ARG BASE_IMAGE
FROM ${BASE_IMAGE}

# Install only what the base lacks, keeping its torch, Transformer Engine and megatron-core.
COPY requirements/amd.txt /tmp/tprimat-requirements.txt
RUN pip freeze | grep -iE '^(torch|transformer[-_]engine|megatron[-_]core|numpy)==' > /tmp/tprimat-keep.txt \
    && pip install --no-cache-dir -c /tmp/tprimat-keep.txt -r /tmp/tprimat-requirements.txt \
    && rm -f /tmp/tprimat-requirements.txt /tmp/tprimat-keep.txt

# torchtitan without its dependencies: the image's torch, triton and datasets stay (requirements/torchtitan.txt).
COPY requirements/torchtitan.txt /tmp/tprimat-torchtitan.txt
RUN pip install --no-cache-dir --no-deps -r /tmp/tprimat-torchtitan.txt && rm -f /tmp/tprimat-torchtitan.txt

# Vendor environment every run needs on every stack (utils/machine/platform_env.py's platform-wide values, which are
# Primus's own run environment for Megatron; a test keeps them equal). The values that differ between Primus
# releases (HSA_NO_SCRATCH_RECLAIM, NVTE_CK_*: utils/spec/stacks.py) are the launcher's, per run.
ENV CUDA_DEVICE_MAX_CONNECTIONS=1 \
    GPU_MAX_HW_QUEUES=2 \
    TORCH_NCCL_HIGH_PRIORITY=1 \
    NCCL_CHECKS_DISABLE=1 \
    RCCL_MSCCL_ENABLE=0 \
    NCCL_PXN_DISABLE=1 \
    TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=0 \
    NVTE_USE_CAST_TRANSPOSE_TRITON=1 \
    NVTE_ROCM_ENABLE_MXFP8=1 \
    TPRIMAT_RUNTIME=docker \
    PYTHONPATH=/workspace/Primus/third_party/Megatron-LM
