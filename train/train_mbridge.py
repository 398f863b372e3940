"""Run one Megatron-Bridge pretraining from recipe settings written by train/mbridge/recipe.py.

Started by the launcher under torchrun on every rank (Megatron-Bridge initialises the process group itself):

    torchrun --nproc_per_node=8 -m train.train_mbridge --settings RUN_DIR/mbridge_settings.json

build_config builds the recipe's ConfigContainer with every TPrimat setting applied; main calls Megatron-Bridge's
pretrain(config, forward_step) with its GPT forward step (v0.6.0: src/megatron/bridge/training/pretrain.py,
.../training/gpt_step.py) and writes the read-back (train/mbridge/readback.py) when training starts: pretrain()
finalizes the container first (runtime_config_update: the mixed-precision and communication-overlap setups, which
write into the model, optimizer and DDP configs, then validate(); setup() then fixes the vocabulary), so only a
read-back taken after it records what ran. It is hooked there (on_train_start) rather than taken after a
finalization of TPrimat's own, because pretrain() finalizes whatever it is given again, and a second finalization
is not one the run would otherwise have gone through. Megatron-Bridge is imported here only, inside the functions,
so the rest of TPrimat (and its tests) never needs it.
"""

from __future__ import annotations

import contextlib
import importlib
import sys

from train.common import settings_file
from train.common.settings_file import assign


def build_config(settings: dict):
    """Megatron-Bridge's own pretrain recipe for the model, with every TPrimat setting applied."""
    import torch
    from megatron.core.transformer.enums import AttnBackend

    from train.mbridge.te_stand_in import UNGUARDED_TE_IMPORTERS, import_recipes

    module, _, function = settings["recipe"].rpartition(".")
    if served := import_recipes({module}):  # first: megatron.bridge's own __init__ reaches the unguarded import
        print(f"[tprimat] no Transformer Engine: its import by {', '.join(UNGUARDED_TE_IMPORTERS)} answered by an "
              f"inert stand-in ({', '.join(served)}); TRANSFORMER_IMPL={settings['transformer_impl']}", flush=True)
    from megatron.bridge.training.mixed_precision import MixedPrecisionConfig, get_mixed_precision_config

    recipe = getattr(importlib.import_module(f"megatron.bridge.recipes.{module}"), function)
    with contextlib.chdir(settings["model_dir"]):  # the recipe's Hub id resolves to launch.write_model_dir's folder
        cfg = recipe()
    for path, value in settings["set"].items():
        assign(cfg, path, value)
    cfg.model.attention_backend = AttnBackend[settings["attention_backend"]]
    if settings["transformer_impl"] == "local":
        from megatron.bridge.models.gpt_provider import local_layer_spec

        from train.common import local_kernels

        cfg.model.transformer_layer_spec = local_layer_spec
        lacking = [name for name, have in local_kernels.available().items() if getattr(cfg.model, name) and not have]
        for name in lacking:  # the read-back records each as it ran
            setattr(cfg.model, name, False)
        if lacking:
            print(f"[tprimat] fused kernels unavailable on this stack, running without: {', '.join(lacking)}",
                  flush=True)
    cfg.model.pipeline_dtype = getattr(torch, settings["pipeline_dtype"]) if settings["pipeline_dtype"] else None
    preset = settings["mixed_precision"]["preset"]  # None: fp32, every reduced precision off
    mixed = get_mixed_precision_config(preset) if preset else MixedPrecisionConfig()
    for key, value in settings["mixed_precision"]["set"].items():
        setattr(mixed, key, value)
    cfg.mixed_precision = mixed
    return cfg


def main(argv: list[str] | None = None) -> int:
    settings = settings_file.load(argv, "train.train_mbridge", __doc__)  # its env set before Megatron-Bridge
    if settings is None:
        return 2
    cpu = settings.get("cpu", False)
    if cpu:  # megatron-core on the CPU, before it is imported (train/common/cpu_compat.py)
        from train.common import cpu_compat

        cpu_compat.apply()
    cfg = build_config(settings)
    resiliency = contextlib.nullcontext()
    if cpu:  # Megatron-Bridge's steps that cannot run without a GPU, each stood in for alone
        from train.mbridge import cpu_stand_ins

        for line in cpu_stand_ins.apply():
            print(f"[tprimat] no GPU: stood in for {line}", flush=True)
        resiliency = cpu_stand_ins.answering_resiliency()

    from megatron.bridge.training.gpt_step import forward_step

    with resiliency as served:
        from megatron.bridge.training.pretrain import pretrain
    if served:
        print(f"[tprimat] no nvidia_resiliency_ext: pretrain.py's import answered by an inert stand-in "
              f"({', '.join(served)})", flush=True)

    train(cfg, settings, pretrain, forward_step)
    return 0


def train(cfg, settings: dict, pretrain, forward_step) -> None:
    """pretrain(cfg, forward_step) with the read-back written when training starts, from the configuration pretrain()
    finalized (its on_train_start event; tests/fixtures/train/mbridge_build_probe.py drives the same wiring)."""
    from megatron.bridge.training.callbacks import CallbackManager

    from train.mbridge import readback
    from utils.datafiles import answer_compile_helpers

    if answered := answer_compile_helpers():  # the wheel's helpers_cpp: no make (utils.datafiles)
        print(f"[tprimat] megatron-core's dataset helpers are compiled: compile_helpers() in {', '.join(answered)} "
              "answered without make (a megatron-core wheel ships no Makefile)", flush=True)
    callbacks = CallbackManager()
    callbacks.register("on_train_start", lambda context: readback.write(context.state.cfg, settings,
                                                                        *readback.world()))
    pretrain(cfg, forward_step, callbacks=callbacks)


if __name__ == "__main__":
    sys.exit(main())
