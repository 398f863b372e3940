"""torchtitan's command: torchrun on torchtitan's own entry point (`torchtitan.train`) with TPrimat's config function
(`--module train.torchtitan --config tprimat`: torchtitan/config/manager.py imports train.torchtitan.config_registry
and calls its `tprimat`), which reads the run's torchtitan_settings.json (train/torchtitan/settings.py). On the CPU the
entry point is train.torchtitan.on_cpu (torchtitan.train after the CPU's stand-ins, train/torchtitan/cpu_stand_ins.py)
with torchtitan's CPU environment on PYTHONPATH (train/torchtitan/environment.py)."""

from __future__ import annotations

from pathlib import Path

from train.launch.builder import Launch, torchrun, vendor_env
from train.torchtitan.environment import environment
from train.torchtitan.settings import SETTINGS_ENV, SETTINGS_FILE, settings
from utils.cli import UsageError
from utils.config import ROOT
from utils.datafiles import PREPARE as PREPARE_COMMAND
from utils.files import write_json
from utils.spec.request import Request

ENTRY_POINT = "torchtitan.train"
CPU_ENTRY_POINT = "train.torchtitan.on_cpu"  # the same, after the CPU's stand-ins
CONFIG_MODULE = "train.torchtitan"  # torchtitan tries <module>.config_registry first
CONFIG_FUNCTION = "tprimat"


def command(req: Request, run_dir: Path, work_dir: Path) -> Launch:
    """torchrun -m torchtitan.train with TPrimat's config function and the run's settings."""
    tokenizer = Path(req.data.tokenizer_dir) / "tokenizer.json"
    if not tokenizer.exists() and not req.environment.dry_run:
        raise UsageError(f"torchtitan builds the model's tokenizer from {tokenizer.parent}, which has none; prepare "
                         f"it first: {PREPARE_COMMAND} (or python3 -m data.fetch tokenizer)")
    path = work_dir / SETTINGS_FILE
    write_json(path, settings(req, str(run_dir)))
    platform = req.identity.platform
    entry = CPU_ENTRY_POINT if platform == "cpu" else ENTRY_POINT
    argv = torchrun(req) + ["-m", entry, "--module", CONFIG_MODULE, "--config", CONFIG_FUNCTION]
    env = {**vendor_env(req), SETTINGS_ENV: str(path), "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
           **environment(platform, build=not req.environment.dry_run)}
    return Launch(argv, env, str(ROOT), [path.name])
