"""Megatron-Bridge 0.6.2's pretrain() on a machine without an accelerator: the few steps of it that cannot run
without a GPU, each stood in for alone, on the CPU only (train_mbridge applies them when its settings say "cpu").

Everything else is the GPU's code path: the recipe, validate() and the runtime update, setup(), Megatron-Bridge's
training loop and logger. megatron-core's own CUDA assumptions are train/common/cpu_compat.py's (mega's on the CPU
too), which train_mbridge applies first, before megatron-core is imported. Beyond them (utils/upstream/table.py
holds each line):

1. megatron/bridge/training/initialize.py:89-91 asserts torch.cuda.is_available() unless allow_no_cuda, which
   setup.py:253 does not pass: setup()'s initialize_megatron is called with allow_no_cuda=True;
2. initialize.py:869 seeds megatron-core's model-parallel RNG tracker only when torch.cuda.device_count() > 0, so
   on the CPU the tracker has no state and the model's first RNG fork raises (megatron-core's
   tensor_parallel/random.py:316): after _set_random_seed the tracker is seeded as that branch seeds it, from the
   seed it gave torch and the ranks of its process groups;
3. megatron-core's megatron/training/models/dist_utils.py:303,306 (_ddp_wrap) makes a CUDA stream for the DDP
   wrapping and runs it there: on the CPU torch.cuda.Stream() is the in-order stream cpu_compat's current_stream
   already is, and torch.cuda.stream() a context that switches nothing;
4. megatron/bridge/training/pretrain.py:19 imports nvidia_resiliency_ext.inprocess unguarded, for a type annotation
   of in-process restart (off here): NVIDIA's index has the version Megatron-Bridge pins, PyPI none that works
   (reference/frameworks.md), so that one import is answered by an inert module (te_stand_in.answering), as
   Transformer Engine's one unguarded import is.

megatron-core's compile_helpers() (initialize.py:147) is answered where a wheel ships no Makefile, on a GPU too
(utils.datafiles.answer_compile_helpers, train_mbridge.train).
"""

from __future__ import annotations

import contextlib
import functools

RESILIENCY_IMPORTERS = ("megatron.bridge.training.pretrain",)


def _seeded_after(set_random_seed):
    """_set_random_seed, then the model-parallel RNG tracker seeded as its CUDA branch would seed it (2)."""

    @functools.wraps(set_random_seed)
    def seeded(seed_, data_parallel_random_init=False, te_rng_tracker=False, inference_rng_tracker=False,
               use_cudagraphable_rng=False, *, pg_collection):
        import torch
        from megatron.core import tensor_parallel
        from megatron.core.utils import get_pg_rank

        set_random_seed(seed_, data_parallel_random_init, te_rng_tracker, inference_rng_tracker,
                        use_cudagraphable_rng, pg_collection=pg_collection)
        if torch.cuda.device_count() > 0:
            return
        seed = torch.initial_seed()  # what it gave torch.manual_seed: the seed with its pipeline (and DP) offsets
        tensor_parallel.model_parallel_cuda_manual_seed(
            seed, te_rng_tracker, inference_rng_tracker, use_cudagraphable_rng,
            tp_rank=get_pg_rank(pg_collection.tp), ep_rank=get_pg_rank(pg_collection.ep),
            etp_rank=get_pg_rank(pg_collection.expt_tp))

    return seeded


def apply() -> list[str]:
    """Stand-ins 1-3 (4 is answering_resiliency, around pretrain's import); returns one line per stand-in for the
    log. Call once, after cpu_compat.apply() (before megatron-core is imported) and after the recipes are imported
    (te_stand_in.import_recipes: megatron.bridge's own import reaches Transformer Engine's unguarded one)."""
    import torch
    from megatron.bridge.training import initialize, setup

    from train.common.cpu_compat import InOrder

    setup.initialize_megatron = functools.partial(initialize.initialize_megatron, allow_no_cuda=True)  # 1.
    initialize._set_random_seed = _seeded_after(initialize._set_random_seed)  # 2.
    torch.cuda.Stream = lambda *args, **kwargs: InOrder()  # 3.
    torch.cuda.stream = lambda *args, **kwargs: contextlib.nullcontext()
    return ["initialize_megatron(allow_no_cuda=True) (initialize.py:89-91, called by setup.py:253)",
            "the model-parallel RNG tracker seeded without CUDA (initialize.py:869)",
            "an in-order stream for megatron-core's DDP wrap (megatron/training/models/dist_utils.py:303,306)"]


def answering_resiliency():
    """The inert nvidia_resiliency_ext for pretrain.py's import alone (4), where it is not installed: import
    megatron.bridge.training.pretrain within it."""
    from train.mbridge.te_stand_in import answering

    return answering("nvidia_resiliency_ext", RESILIENCY_IMPORTERS)
