"""sitecustomize for bench/torchtitan_gpu_check.sh on a machine whose torch is older than torchtitan 0.3.0 asks for.

torchtitan 0.3.0 imports torch.distributed.fsdp.DataParallelMeshDims (torch 2.13) at start, in modules every run
imports (torchtitan/distributed/full_dtensor.py), and uses it only under parallelism.spmd_backend "full_dtensor",
which TPrimat never sets. The placeholder lets torchtitan start on such a torch; a call that really needs the class
fails on it at once instead of running something else.
"""

import torch
import torch.distributed.fsdp as fsdp


class DataParallelMeshDims:
    """Placeholder: this torch has no DataParallelMeshDims (bench/torch_compat.py)."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError("torch.distributed.fsdp.DataParallelMeshDims is a placeholder of bench/torch_compat.py: "
                           f"torch {torch.__version__} lacks it (torchtitan's full_dtensor path needs torch 2.13)")


if not hasattr(fsdp, "DataParallelMeshDims"):
    fsdp.DataParallelMeshDims = DataParallelMeshDims
