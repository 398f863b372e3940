"""The command of one run per framework, and the files generated for it, from the run's request.

Each framework (utils.config's FRAMEWORKS) is one function of COMMANDS: mega, fsdp and autotp run torchrun
on their trainer (train/train_mega.py, train_fsdp.py, train_autotp.py) with the run's config.json; nemo runs
torchrun on train/train_nemo.py with the recipe settings of train/nemo/recipe.py; prim runs Primus's
examples/run_pretrain.sh from PRIMUS_PATH with the experiment of train/prim/config.py.
Every command gets the platform's environment with its framework's (utils/machine/platform_env), and a multi-node one
the network settings of utils/machine/netenv.
"""

from __future__ import annotations

import os
import shlex
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

from train.nemo.recipe import recipe_settings
from train.prim.config import ShippedConfigMissing, command as primus_command
from train.prim.config import write_experiment
from utils.cli import UsageError, warn
from utils.config import ROOT
from utils.datafiles import PREPARE as PREPARE_COMMAND
from utils.files import write_json
from utils.machine.netenv import network_env
from utils.machine.platform_env import DEFAULT_PRIMUS_PATH, platform_env
from utils.spec.request import Request

# Variables of the collective libraries (NCCL, RCCL, gloo) recorded in launch.json as the run is started with them.
NETWORK_PREFIXES = ("NCCL_", "RCCL_", "GLOO_")
REQUEST_FILE = "config.json"  # the run's request, in the run directory (written by node 0)


@dataclass
class Launch:
    """The exact command of one run and the files generated for it."""

    argv: list[str]
    env: dict[str, str]  # only what TPrimat sets on top of the inherited environment
    cwd: str
    generated: list[str] = field(default_factory=list)

    def shell(self) -> str:
        """The command as one line a user can paste."""
        assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return f"cd {shlex.quote(self.cwd)} && {assignments} {shlex.join(self.argv)}"


def torchrun(req: Request) -> list[str]:
    """torchrun for this node: standalone on one node, the configured rendezvous across nodes."""
    lay, node = req.parallelism, req.environment
    base = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={lay.gpus_per_node}"]
    if lay.nnodes == 1:
        return base + ["--standalone", "--nnodes=1"]
    return base + [f"--nnodes={lay.nnodes}", f"--node_rank={node.node_rank}",
                   f"--master_addr={node.master_addr}", f"--master_port={node.master_port}"]


def vendor_env(req: Request) -> dict[str, str]:
    """utils/machine/platform_env's variables for the platform and framework where the user has not set them otherwise
    (theirs win), the multi-node network settings of utils/machine/netenv (the request's network section, its NET_*
    knobs, beats what is exported, which beats the vendor's defaults), and unbuffered Python so that the console
    streams into train.log and the terminal as it happens."""
    platform = req.identity.platform
    network = network_env(platform, req.network) if req.parallelism.nnodes > 1 else {}
    wanted = platform_env(platform, req.identity.framework)
    return {**{key: os.environ.get(key, value) for key, value in wanted.items()}, **network,
            "PYTHONUNBUFFERED": "1"}


def node_identity(launch: Launch) -> dict:
    """This node as launch.json records it: host name, Slurm's node name, and the collective libraries'
    variables the run is started with (the inherited ones with the launch's on top)."""
    env = {**os.environ, **launch.env}
    return {"hostname": socket.gethostname(),
            **({"slurm_node": os.environ["SLURMD_NODENAME"]} if os.environ.get("SLURMD_NODENAME") else {}),
            "network": {key: env[key] for key in sorted(env) if key.startswith(NETWORK_PREFIXES)}}


def run_environment(launch: Launch, platform: str, framework: str = "") -> dict[str, str]:
    """The platform's and framework's variables (utils/machine/platform_env) as the run is started with them."""
    env = {**os.environ, **launch.env}
    return {key: env[key] for key in platform_env(platform, framework) if key in env}


def _own_trainer(script: str):
    """A TPrimat trainer that reads everything from the run's config.json (on every node: the nodes share the
    run directory, and node 0 writes it before its torchrun lets any worker start)."""
    def command(req: Request, run_dir: Path, work_dir: Path) -> Launch:
        argv = torchrun(req) + [script, "--request", str(run_dir / REQUEST_FILE), "--run-dir", str(run_dir)]
        return Launch(argv, vendor_env(req), str(ROOT))
    command.__doc__ = f"torchrun on {script} with the run's config.json."
    return command


def _nemo(req: Request, run_dir: Path, work_dir: Path) -> Launch:
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


def _prim(req: Request, run_dir: Path, work_dir: Path) -> Launch:
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


COMMANDS = {"mega": _own_trainer("train/train_mega.py"), "nemo": _nemo, "prim": _prim,
            "fsdp": _own_trainer("train/train_fsdp.py"), "autotp": _own_trainer("train/train_autotp.py")}


def prepare(req: Request, run_dir: Path, work_dir: Path) -> Launch:
    """The framework's command and generated configuration (written into work_dir) for the run;
    UsageError when the run cannot be started as asked."""
    return COMMANDS[req.identity.framework](req, run_dir, work_dir)
