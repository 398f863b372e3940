"""mbridge's command: torchrun on train/train_mbridge.py (as a module, like train_nemo) with the recipe settings of
train/mbridge/recipe.py, written into the run's mbridge_settings.json. On a GPU the image's Python runs it; on the
CPU its own environment's (train/mbridge/environment.py, built on first use), whose torchrun starts the ranks."""

from __future__ import annotations

from pathlib import Path

from train.launch.builder import Launch, torchrun, vendor_env
from train.mbridge import environment
from train.mbridge.recipe import recipe_settings
from utils.cli import UsageError
from utils.config import ROOT
from utils.datafiles import PREPARE as PREPARE_COMMAND
from utils.files import write_json
from utils.spec.request import Request


def write_model_dir(req: Request, settings: dict) -> Path:
    """The request's model spec as the Hugging Face config its recipe asks for by Hub id, in a local folder of that
    name (from_pretrained reads a relative path that is a folder instead of the Hub): the recipe then builds
    TPrimat's variant, a proxy's fewer layers included, and nothing is downloaded."""
    from train.common.hf_config import hf_config

    folder = Path(settings["model_dir"]) / settings["hub_id"]
    config = hf_config(req.model, "sdpa")
    # AutoBridge picks its model bridge from the architecture a Hub config names (LlamaForCausalLM, ...)
    config.architectures = [type(config).__name__.removesuffix("Config") + "ForCausalLM"]
    config.save_pretrained(folder)
    return folder


def command(req: Request, run_dir: Path, work_dir: Path) -> Launch:
    """Megatron-Bridge's recipe with the settings of train/mbridge/recipe.py, applied by train/train_mbridge.py;
    UsageError where this run cannot start as asked."""
    stack, cpu = req.stack, req.identity.platform == "cpu"
    if not stack.megatron_bridge and not req.environment.dry_run and not cpu:  # the CPU's is its own environment
        raise UsageError(f"stack {stack.name} ({stack.image}) carries no Megatron-Bridge; run mbridge on a stack row "
                         "with megatron_bridge (utils/spec/stacks.py), or FRAMEWORK=nemo on this one")
    tokenizer = Path(req.data.tokenizer_dir) / "tokenizer.json"
    if not tokenizer.exists() and not req.environment.dry_run:
        raise UsageError(f"Megatron-Bridge takes the model's tokenizer from {tokenizer.parent}, which has none; "
                         f"prepare it first: {PREPARE_COMMAND} (or python3 -m data.fetch tokenizer)")
    if cpu:  # its own Python's torchrun, before anything is written; a dry run names it, building nothing
        python = environment.planned() if req.environment.dry_run else environment.interpreter()
        python = python or f"<a Python {environment.PYTHON} environment of {environment.REQUIREMENTS.name}>"
    settings = recipe_settings(req, str(run_dir))
    path = work_dir / "mbridge_settings.json"
    write_json(path, settings)
    write_model_dir(req, settings)
    argv = torchrun(req) + ["--module", "train.train_mbridge", "--settings", str(path)]
    if cpu:
        argv[0] = str(python)
    return Launch(argv, {**vendor_env(req), **settings["env"]}, str(ROOT), [path.name])
