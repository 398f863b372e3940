"""How runs are started (config.env's Slurm, network and run-switch sections): the launcher, Slurm's
job, the multi-node network (utils.machine.netenv turns the NET_* knobs into each vendor's variables) and
the switches of one invocation."""

from __future__ import annotations

import shutil

from utils.config.parse import NAME, POSITIVE, Knob

SLURM = {
    "LAUNCHER": Knob("enum", ("auto", "local", "slurm")),
    "SLURM_PARTITION": NAME,
    "SLURM_ACCOUNT": NAME,
    "SLURM_QOS": NAME,
    "SLURM_TIME": Knob("str", pattern=r"([0-9]+-)?[0-9]{1,2}(:[0-9]{2}){0,2}",
                       rule="a Slurm time limit [D-]HH:MM:SS, e.g. 04:00:00"),
    "SLURM_CONTAINER": Knob("enum", ("none", "pyxis")),
    "SLURM_CONTAINER_IMAGE": Knob("str"),
    "SLURM_PENDING_TIMEOUT": POSITIVE,
}

NETWORK = {
    "NET_SOCKET_IFNAME": NAME,
    "NET_IB_HCA": NAME,
    "NET_IB_GID_INDEX": Knob("str", pattern="[0-9]*", rule="empty or an integer (digits 0-9 only)"),
    "NET_DEBUG": Knob("enum", ("", "VERSION", "WARN", "INFO", "TRACE")),
    "NET_LINK_GBPS": Knob("float", high=1e6, bounds="(]", optional=True,
                          rule="the inter-node bandwidth per GPU in Gb/s (e.g. 400 for InfiniBand NDR)"),
}

SWITCHES = {
    "DRY_RUN": Knob("bool"),
    "DETACH": Knob("bool"),
    "FORCE": Knob("bool"),
}


def launch_mode(values: dict, env: dict) -> str:
    """slurm: submit from a login node (LAUNCHER=slurm, or auto with NNODES>1 and sbatch on PATH)."""
    if values["LAUNCHER"] == "auto":
        wanted = values["NNODES"] > 1 and shutil.which("sbatch", path=env.get("PATH")) is not None
        return "slurm" if wanted else "local"
    return values["LAUNCHER"]
