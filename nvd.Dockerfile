# TPrimat on NVIDIA GPUs: NeMo 25.04 (NeMo 2.x, NeMo-Run, megatron-core, Transformer Engine).
# The repository is mounted at run time; no secret is ever copied in (HF_TOKEN arrives with
# --env-file at run time).
FROM nvcr.io/nvidia/nemo:25.04

# Install only what the base lacks, keeping its torch, Transformer Engine, megatron-core and NeMo.
COPY requirements/nvd.txt /tmp/tprimat-requirements.txt
RUN pip freeze | grep -iE '^(torch|transformer[-_]engine|megatron[-_]core|nemo[-_]toolkit|numpy)==' > /tmp/tprimat-keep.txt \
    && pip install --no-cache-dir -c /tmp/tprimat-keep.txt -r /tmp/tprimat-requirements.txt \
    && rm -f /tmp/tprimat-requirements.txt /tmp/tprimat-keep.txt

# torchtitan without its dependencies: the image's torch, triton and datasets stay (requirements/torchtitan.txt).
COPY requirements/torchtitan.txt /tmp/tprimat-torchtitan.txt
RUN pip install --no-cache-dir --no-deps -r /tmp/tprimat-torchtitan.txt && rm -f /tmp/tprimat-torchtitan.txt

# Vendor environment every run needs (the same values as utils/machine/platform_env.py; a test keeps them equal).
ENV CUDA_DEVICE_MAX_CONNECTIONS=1 \
    NVTE_FLASH_ATTN=1 \
    NVTE_FUSED_ATTN=1 \
    TPRIMAT_RUNTIME=docker
