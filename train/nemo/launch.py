"""nemo's command: torchrun on train/train_nemo.py (as a module, so that train/ never shadows NeMo's own package)
with the recipe settings of train/nemo/recipe.py, written into the run's nemo_settings.json."""

from __future__ import annotations

from pathlib import Path

from train.launch.builder import Launch, torchrun, vendor_env
from train.nemo.recipe import recipe_settings
from utils.cli import UsageError
from utils.config import ROOT
from utils.datafiles import PREPARE as PREPARE_COMMAND
from utils.files import write_json
from utils.spec.request import Request


def command(req: Request, run_dir: Path, work_dir: Path) -> Launch:
    """NeMo 2.0's recipe with the settings of train/nemo/recipe.py, applied by train/train_nemo.py."""
    tokenizer = Path(req.data.tokenizer_dir) / "tokenizer.json"
    if req.data.mock_data and not tokenizer.exists() and not req.environment.dry_run:
        raise UsageError(f"NeMo's mock data takes its vocabulary from the model's tokenizer, and {tokenizer.parent} "
                         f"has none; prepare it first: {PREPARE_COMMAND} (or python3 -m data.fetch tokenizer)")
    settings = recipe_settings(req, str(run_dir))
    path = work_dir / "nemo_settings.json"
    write_json(path, settings)
    argv = torchrun(req) + ["--module", "train.train_nemo", "--settings", str(path)]
    return Launch(argv, {**vendor_env(req), **settings["env"]}, str(ROOT), [path.name])
