"""What a framework's launch module builds its command from (train/<framework>/launch.py): the Launch record, torchrun
for this node and the platform's environment. The dispatch to those modules (train/launch/command.py) imports them
through their registry entries; they import only this, so no import runs in a loop."""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field

from utils import run_files
from utils.machine.netenv import network_env
from utils.machine.platform_env import platform_env
from utils.spec.request import Request

# Variables of the collective libraries (NCCL, RCCL, gloo) recorded in launch.json as the run is started with them.
NETWORK_PREFIXES = ("NCCL_", "RCCL_", "GLOO_")
REQUEST_FILE = run_files.REQUEST


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
    wanted = platform_env(platform, req.identity.framework, req.stack.name)
    return {**{key: os.environ.get(key, value) for key, value in wanted.items()}, **network,
            "PYTHONUNBUFFERED": "1"}
