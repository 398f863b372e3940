"""Multi-node network settings (utils.machine.netenv): vendor defaults, what the user already exported, and
the NET_* knobs, in that order of precedence; never an empty value."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.shell_harness import FakeMachine
from utils.config import ROOT
from utils.machine.netenv import network_env
from utils.spec.request import Network


def test_amd_gets_the_roce_settings_amds_own_launcher_uses():
    assert network_env("amd", Network(), {}) == {"NCCL_CROSS_NIC": "0", "NCCL_DEBUG": "INFO", "NCCL_IB_GID_INDEX": "3"}


def test_nvidia_leaves_the_network_to_the_library_and_both_vendors_log_the_transport_it_chose():
    assert network_env("nvd", Network(), {}) == {"NCCL_DEBUG": "INFO"}
    assert network_env("cpu", Network(), {}) == {}


@pytest.mark.parametrize("platform", ["amd", "nvd"])
def test_a_users_nccl_debug_or_the_net_debug_knob_replaces_the_transport_log(platform):
    assert network_env(platform, Network(), {"NCCL_DEBUG": "WARN"})["NCCL_DEBUG"] == "WARN"
    assert network_env(platform, Network(debug="TRACE"), {"NCCL_DEBUG": "WARN"})["NCCL_DEBUG"] == "TRACE"


def test_socket_interface_knob_sets_the_bootstrap_and_gloo_interface():
    assert network_env("nvd", Network(socket_ifname="ens1f0"), {}) == {
        "NCCL_SOCKET_IFNAME": "ens1f0", "GLOO_SOCKET_IFNAME": "ens1f0", "NCCL_DEBUG": "INFO"}


def test_cpu_runs_only_need_gloos_interface():
    assert network_env("cpu", Network(socket_ifname="eth1", ib_hca="mlx5_0"), {}) == {
        "GLOO_SOCKET_IFNAME": "eth1"}


def test_a_variable_already_exported_beats_the_vendor_default():
    assert network_env("amd", Network(), {"NCCL_IB_GID_INDEX": "1"})["NCCL_IB_GID_INDEX"] == "1"


def test_a_knob_beats_what_is_exported():
    env = network_env("amd", Network(ib_gid_index="5"), {"NCCL_IB_GID_INDEX": "1"})
    assert env["NCCL_IB_GID_INDEX"] == "5"


def test_empty_knobs_and_variables_set_nothing():
    """An empty NCCL_IB_GID_INDEX reads as index 0 in NCCL, so empty never reaches the environment."""
    env = network_env("nvd", Network(socket_ifname=" ", ib_gid_index=""), {"NCCL_IB_HCA": ""})
    assert env == {"NCCL_DEBUG": "INFO"}


def test_unknown_platform_is_an_error():
    with pytest.raises(ValueError, match="valid: nvd, amd, cpu"):
        network_env("tpu", Network(), {})


def test_command_line_prints_shell_exports_from_the_environment():
    out = subprocess.run([sys.executable, "-m", "utils.machine.netenv", "amd"], cwd=ROOT, capture_output=True, text=True,
                         env={"NET_SOCKET_IFNAME": "^docker0,lo", "PATH": "/usr/bin:/bin"}, check=True).stdout
    assert out.splitlines() == ["export GLOO_SOCKET_IFNAME='^docker0,lo'", "export NCCL_CROSS_NIC=0",
                                "export NCCL_DEBUG=INFO", "export NCCL_IB_GID_INDEX=3",
                                "export NCCL_SOCKET_IFNAME='^docker0,lo'"]


def test_command_line_reads_the_knobs_of_config_env_under_the_environment_as_the_launcher_does(tmp_path):
    node = FakeMachine(tmp_path)  # a CPU machine: the platform named need not be this machine's
    config = node.root / "config.env"
    config.write_text(re.sub(r"(?m)^NET_SOCKET_IFNAME=.*$", "NET_SOCKET_IFNAME=ens1f0",
                             re.sub(r"(?m)^NET_DEBUG=.*$", "NET_DEBUG=INFO", config.read_text())))

    def netenv(*args: str, **env: str) -> list[str]:
        return subprocess.run([sys.executable, "-m", "utils.machine.netenv", *args], cwd=node.root, capture_output=True,
                              text=True, env={**node.env, **env}, check=True).stdout.splitlines()

    assert netenv("nvd") == ["export GLOO_SOCKET_IFNAME=ens1f0", "export NCCL_DEBUG=INFO",
                             "export NCCL_SOCKET_IFNAME=ens1f0"]
    assert "export NCCL_SOCKET_IFNAME=eth9" in netenv("nvd", NET_SOCKET_IFNAME="eth9")
    assert netenv() == ["export GLOO_SOCKET_IFNAME=ens1f0"]  # no platform: this machine's, the CPU
