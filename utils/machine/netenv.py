"""Multi-node network settings: the one place per vendor where the collective library learns which
network to use between nodes.

NCCL (NVIDIA) and RCCL (AMD; it reads the same NCCL_* names) find InfiniBand/RoCE adapters and a
socket interface by themselves, but clusters often need them named: several Ethernet interfaces
(the bootstrap picks a wrong one and hangs), a RoCE fabric whose GID index is not NCCL's default,
or only some HCAs wired to the GPU fabric. gloo (the CPU platform, and Megatron's CPU-side groups
on every platform) needs the same socket interface. The configuration names these once, vendor
neutrally (NET_* knobs); this module turns them into each vendor's variables, on top of the
vendor's defaults. Only non-empty values are ever set: an empty NCCL_IB_GID_INDEX would be read
as 0, not as "unset".

Precedence, low to high: the vendor's default, a variable already in the environment (a cluster's
module or the user's own export), a non-empty NET_* knob.

Both GPU vendors default to NCCL_DEBUG=INFO: only its lines say whether the nodes talk over RDMA
("Using network IB") or fell back to TCP sockets, which the result records (evaluate/logs/parse.py). It
costs a few dozen lines per rank and communicator at start-up (a few MB for 16 GPUs), none per step:
the default subsystems leave out the per-collective ones.

    python3 -m utils.machine.netenv [amd|nvd|cpu]   # export lines for the shell: what a multi-node run gets

The command line reads the NET_* knobs as the launcher does (utils.config: the environment over
config.env); without a platform it takes this machine's, as the launcher resolves it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from dataclasses import dataclass, field
from typing import Mapping

from utils.config import ConfigError, load_config
from utils.spec.request import Network


@dataclass(frozen=True)
class Vendor:
    """One vendor's collective library: what each network setting sets, and the defaults it needs."""

    library: str
    settings: dict[str, tuple[str, ...]]  # a field of the request's Network (NET_<NAME>) -> the variables it sets
    defaults: dict[str, str] = field(default_factory=dict)


_SOCKET = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
_GPU_SETTINGS = {
    "socket_ifname": _SOCKET,  # bootstrap and TCP fallback (NCCL/RCCL) and gloo: e.g. eth0, ^docker,lo
    "ib_hca": ("NCCL_IB_HCA",),  # InfiniBand/RoCE adapters to use: e.g. mlx5_0,mlx5_1 or ^mlx5_4
    "ib_gid_index": ("NCCL_IB_GID_INDEX",),  # RoCE GID index (3 = RoCE v2 over IPv4 on most fabrics)
    "debug": ("NCCL_DEBUG",),  # WARN | INFO (INFO prints the transport chosen: NET/IB or NET/Socket)
}

_TRANSPORT_LOG = {"NCCL_DEBUG": "INFO"}
VENDORS: dict[str, Vendor] = {
    "nvd": Vendor("NCCL", _GPU_SETTINGS, _TRANSPORT_LOG),
    # AMD's own launcher (Primus examples/run_pretrain.sh) sets these for every multi-node run on its
    # RoCE fabrics; TPrimat's Megatron runs on AMD get the same, so mega and prim see one network.
    "amd": Vendor("RCCL", _GPU_SETTINGS, {"NCCL_IB_GID_INDEX": "3", "NCCL_CROSS_NIC": "0", **_TRANSPORT_LOG}),
    "cpu": Vendor("gloo", {"socket_ifname": ("GLOO_SOCKET_IFNAME",)}),
}


def network_env(platform: str, network: Network, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables a multi-node run of the platform gets (only those with a value), from the request's network
    section."""
    try:
        vendor = VENDORS[platform]
    except KeyError:
        raise ValueError(f"unknown platform {platform!r}; valid: {', '.join(VENDORS)}") from None
    environ = os.environ if environ is None else environ
    settings = dict(vendor.defaults)
    names = set(settings).union(*vendor.settings.values())
    settings.update({name: environ[name] for name in names if environ.get(name)})
    for setting, variables in vendor.settings.items():
        value = (getattr(network, setting) or "").strip()
        if value:
            settings.update(dict.fromkeys(variables, value))
    return dict(sorted(settings.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m utils.machine.netenv", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("platform", nargs="?", choices=list(VENDORS),
                        help="amd, nvd or cpu (default: this machine's, as the launcher resolves it)")
    args = parser.parse_args(argv)
    env = dict(os.environ, DRY_RUN="1")  # nothing runs here: the platform need not be this machine's
    if args.platform:
        env["PLATFORM"] = args.platform
    try:
        cfg = load_config(env)
    except ConfigError as err:
        err.report("utils.machine.netenv")
        return 2
    for key, value in network_env(cfg.platform, Network.from_knobs(cfg.values)).items():
        print(f"export {key}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
