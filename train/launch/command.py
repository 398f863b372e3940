"""The command of one run per framework, and the files generated for it, from the run's request.

Each framework's registry entry (utils/frameworks/) says how its command is built: TPrimat's own trainers (mega,
fsdp, autotp) are torchrun on the entry's `trainer` script with the run's config.json (own_trainer); a framework
with its own launcher names the function of its package that builds its command and generated files (nemo:
train.nemo.launch, torchrun on train/train_nemo.py with the recipe settings; prim: train.prim.launch, the launcher
of the stack's Primus release with the run's experiment).
Every command gets the platform's environment with its framework's (utils/machine/platform_env), and a multi-node one
the network settings of utils/machine/netenv.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from train.launch.builder import NETWORK_PREFIXES, REQUEST_FILE, Launch, torchrun, vendor_env
from utils.config import ROOT
from utils.frameworks import TABLE, resolve
from utils.machine.platform_env import platform_env
from utils.spec.request import Request


def node_identity(launch: Launch, platform_keys: frozenset[str] = frozenset()) -> dict:
    """This node as launch.json records it: host name, Slurm's node name, and the collective libraries'
    network variables the run is started with (the inherited ones with the launch's on top; the platform's own,
    platform_keys, are its environment, recorded apart)."""
    env = {**os.environ, **launch.env}
    return {"hostname": socket.gethostname(),
            **({"slurm_node": os.environ["SLURMD_NODENAME"]} if os.environ.get("SLURMD_NODENAME") else {}),
            "network": {key: env[key] for key in sorted(env)
                        if key.startswith(NETWORK_PREFIXES) and key not in platform_keys}}


def run_environment(launch: Launch, platform: str, framework: str = "", stack: str = "") -> dict[str, str]:
    """The platform's, stack's and framework's variables (utils/machine/platform_env) as the run is started with
    them."""
    env = {**os.environ, **launch.env}
    return {key: env[key] for key in platform_env(platform, framework, stack) if key in env}


def own_trainer(req: Request, run_dir: Path) -> Launch:
    """torchrun on the framework's own trainer (its registry entry's `trainer`), which reads everything from the
    run's config.json (on every node: the nodes share the run directory, and node 0 writes it before its torchrun
    lets any worker start)."""
    script = TABLE[req.identity.framework].trainer
    argv = torchrun(req) + [script, "--request", str(run_dir / REQUEST_FILE), "--run-dir", str(run_dir)]
    return Launch(argv, vendor_env(req), str(ROOT))


def prepare(req: Request, run_dir: Path, work_dir: Path) -> Launch:
    """The framework's command and generated configuration (written into work_dir) for the run;
    UsageError when the run cannot be started as asked."""
    entry = TABLE[req.identity.framework]
    if entry.trainer:
        return own_trainer(req, run_dir)
    return resolve(entry.command)(req, run_dir, work_dir)
