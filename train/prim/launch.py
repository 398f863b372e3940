"""prim's command: the run's Primus release's own launcher (train/prim/releases.py) with the run's experiment
(train/prim/config.py), from PRIMUS_PATH or the release's checkout."""

from __future__ import annotations

from pathlib import Path

from train.launch.builder import Launch, vendor_env
from train.prim.config import NotApplied, ShippedConfigMissing, UnknownKeys, checkout, command as primus_command
from train.prim.config import write_experiment
from train.prim.presets import PresetsMissing
from utils.cli import UsageError, warn
from utils.spec.request import Request


def command(req: Request, run_dir: Path, work_dir: Path) -> Launch:
    """Primus's own launcher with the experiment of train/prim/config.py; a key the release's presets lack is
    refused here, in a dry run too, before the run starts."""
    exp_path = work_dir / "primus_experiment.yaml"
    primus = checkout(req)
    cmd = primus_command(req, primus, exp_path, str(work_dir))
    launch = Launch(cmd.argv, {**vendor_env(req), **cmd.env}, cmd.cwd)
    try:
        base = write_experiment(req, primus, exp_path, str(run_dir))
    except (UnknownKeys, NotApplied) as err:
        raise UsageError(str(err)) from None
    except (ShippedConfigMissing, PresetsMissing, ModuleNotFoundError) as err:
        if isinstance(err, ModuleNotFoundError) and err.name != "yaml":
            raise
        if not req.environment.dry_run:
            raise UsageError(str(err)) from None
        # A dry run of the docker runtime plans on the host with the standard library, where the image's Primus
        # is not (v25.11) and a checkout cloned for v26.5 cannot be read without PyYAML.
        warn(f"dry run: {exp_path.name} not written: {err}")
        return launch
    print(f"[tprimat] Primus experiment {exp_path} derived from {base}", flush=True)
    launch.generated.append(exp_path.name)
    return launch
