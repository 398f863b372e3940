# TPrimat on AMD GPUs, FROM the chosen stack's Primus image (utils/spec/stacks.py: ROCm, PyTorch,
# Transformer Engine, hipBLASLt, RCCL, Primus at /workspace/Primus with its own Megatron-LM).
# shell/lib/docker.sh passes the STACK row's image as BASE_IMAGE; the default is the newest AMD row
# (a test keeps them equal). The repository is mounted at run time; no secret is ever copied in
# (HF_TOKEN arrives with --env-file at run time).
ARG BASE_IMAGE=rocm/primus:v26.5
FROM ${BASE_IMAGE}

# Install only what the base lacks, keeping its torch, Transformer Engine and megatron-core.
COPY requirements/amd.txt /tmp/tprimat-requirements.txt
RUN pip freeze | grep -iE '^(torch|transformer[-_]engine|megatron[-_]core|numpy)==' > /tmp/tprimat-keep.txt \
    && pip install --no-cache-dir -c /tmp/tprimat-keep.txt -r /tmp/tprimat-requirements.txt \
    && rm -f /tmp/tprimat-requirements.txt /tmp/tprimat-keep.txt

# torchtitan without its dependencies: the image's torch, triton and datasets stay (requirements/torchtitan.txt).
COPY requirements/torchtitan.txt /tmp/tprimat-torchtitan.txt
RUN pip install --no-cache-dir --no-deps -r /tmp/tprimat-torchtitan.txt && rm -f /tmp/tprimat-torchtitan.txt

# Vendor environment every run needs (the same values as utils/machine/platform_env.py, which are Primus
# v25.11's own defaults for Megatron; a test keeps them equal).
ENV HSA_NO_SCRATCH_RECLAIM=0 \
    CUDA_DEVICE_MAX_CONNECTIONS=1 \
    NVTE_CK_USES_BWD_V3=0 \
    TPRIMAT_RUNTIME=docker \
    PYTHONPATH=/workspace/Primus/third_party/Megatron-LM
