"""prim's command: Primus's own launcher from PRIMUS_PATH with the run's experiment YAML (train/prim/config.py)."""

from __future__ import annotations

import os
from pathlib import Path

from train.launch.command import Launch, vendor_env
from train.prim.config import ShippedConfigMissing, command as primus_command
from train.prim.config import write_experiment
from utils.cli import UsageError, warn
from utils.machine.platform_env import DEFAULT_PRIMUS_PATH
from utils.spec.request import Request


def command(req: Request, run_dir: Path, work_dir: Path) -> Launch:
    """Primus's own launcher with the experiment of train/prim/config.py."""
    primus = Path(os.environ.get("PRIMUS_PATH") or DEFAULT_PRIMUS_PATH)
    exp_path = work_dir / "primus_experiment.yaml"
    cmd = primus_command(req, primus, exp_path, str(work_dir))
    try:
        base = write_experiment(req, primus, exp_path, str(run_dir))
    except ShippedConfigMissing as err:
        if not req.environment.dry_run:
            raise UsageError(str(err)) from None
        # A dry run of the docker runtime plans on the host, where the image's Primus is not.
        warn(f"dry run: {exp_path.name} not written: {err}")
        return Launch(cmd.argv, {**vendor_env(req), **cmd.env}, cmd.cwd)
    print(f"[tprimat] Primus experiment {exp_path} derived from {base}", flush=True)
    return Launch(cmd.argv, {**vendor_env(req), **cmd.env}, cmd.cwd, [exp_path.name])
