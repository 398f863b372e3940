# TPrimat on NVIDIA GPUs, FROM the chosen stack's NeMo Framework image (utils/spec/stacks.py:
# NeMo 2 on 25.x, Megatron-Bridge on 26.x; megatron-core, Transformer Engine). BASE_IMAGE has no
# default: the stack table is its one source, and the build (shell/lib/docker.sh, ./shell/build.sh)
# passes the STACK row's image. By hand: eval "$(python3 -m utils.config stack nvd)" && docker build
# --build-arg BASE_IMAGE="${STACK_IMAGE}" --file nvd.Dockerfile . The repository is mounted at run
# time; no secret is ever copied in (HF_TOKEN arrives with --env-file at run time).
ARG BASE_IMAGE
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
