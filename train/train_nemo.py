"""Run one NeMo 2.0 pretraining from recipe settings written by train/nemo/recipe.py.

Started by the launcher under torchrun on every rank (NeMo runs in the current process group):

    torchrun --nproc_per_node=8 -m train.train_nemo --settings RUN_DIR/nemo_settings.json

NeMo is imported here only, inside main(), so the rest of TPrimat (and its tests) never needs it.
"""

from __future__ import annotations

import sys

from train.common import settings_file
from train.common.settings_file import assign




def build_recipe(settings: dict):
    """NeMo's own pretrain recipe for the model, with every TPrimat setting applied."""
    import nemo_run as run
    import torch
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.transformer.enums import AttnBackend
    from nemo.collections import llm
    from nemo.collections.common.tokenizers.huggingface.auto_tokenizer import AutoTokenizer
    from nemo.collections.llm.recipes.precision import mixed_precision
    from nemo.lightning.pytorch.callbacks import NsysCallback
    from nemo.utils.exp_manager import TimingCallback

    from train.nemo.readback import EffectiveSettings
    from train.nemo.timer import StepTimer

    callback_classes = {"TimingCallback": TimingCallback, "NsysCallback": NsysCallback}
    recipe = getattr(llm, settings["recipe"]).pretrain_recipe(
        dir=settings["set"]["log.log_dir"], name=settings["name"],
        num_nodes=settings["num_nodes"], num_gpus_per_node=settings["num_gpus_per_node"])
    for path, value in settings["set"].items():
        assign(recipe, path, value)
    recipe.model.config.attention_backend = AttnBackend[settings["attention_backend"]]
    if settings["pipeline_dtype"]:
        recipe.trainer.strategy.pipeline_dtype = getattr(torch, settings["pipeline_dtype"])
    recipe.trainer.strategy.ddp = run.Config(DistributedDataParallelConfig, **settings["ddp"])
    plugin = getattr(mixed_precision, settings["precision"]["plugin"])()
    for key, value in settings["precision"]["set"].items():
        setattr(plugin, key, value)
    recipe.trainer.plugins = plugin

    data = dict(settings["data"])
    module = data.pop("module")
    tokenizer = run.Config(AutoTokenizer, pretrained_model_name=data.pop("tokenizer_dir"))
    data_class = llm.PreTrainingDataModule if module == "PreTrainingDataModule" else llm.MockDataModule
    recipe.data = run.Config(data_class, tokenizer=tokenizer, **data)

    callbacks = [run.Config(callback_classes[c["class"]], **{k: v for k, v in c.items() if k != "class"})
                 for c in settings["callbacks"]]
    # TPrimat's step timer and peak memory beside NeMo's TimingCallback, whose figure stays a raw one
    recipe.trainer.callbacks = callbacks + [run.Config(EffectiveSettings), run.Config(StepTimer, **settings["step_timer"])]
    return recipe


def main(argv: list[str] | None = None) -> int:
    settings = settings_file.load(argv, "train.train_nemo", __doc__)  # its env set before NeMo is imported
    if settings is None:
        return 2
    recipe = build_recipe(settings)

    import nemo_run as run

    run.run(recipe, direct=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
