# TPrimat on NVIDIA GPUs, FROM the chosen stack's NeMo Framework image (utils/spec/stacks.py:
# NeMo 2 on 25.x, Megatron-Bridge on 26.x; megatron-core, Transformer Engine). shell/lib/docker.sh
# passes the STACK row's image as BASE_IMAGE; the default is the newest NVIDIA row (a test keeps them
# equal). The repository is mounted at run time; no secret is ever copied in (HF_TOKEN arrives with
# --env-file at run time).
ARG BASE_IMAGE=nvcr.io/nvidia/nemo:26.08
FROM ${BASE_IMAGE}

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
