"""A real two-node Slurm cluster on this machine, for the multi-node tests.

MUNGE and Slurm from the distribution's packages (tests/slurm/install.sh), every daemon in the
foreground as a child of this process: one private munged (own key and socket), slurmctld, and one
slurmd per emulated node (`slurmd -N n1`, `-N n2`). Everything lives in a private temporary
directory with unusual ports, so it never touches /etc/slurm or a system MUNGE. Clients find it
through SLURM_CONF (see `SlurmCluster.env`). Every daemon is stopped by the process id recorded at
its start, also when starting fails.

    python3 -m tests.slurm.cluster   # start it, print the environment to use it, stop on Ctrl-C
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

NODES = ("n1", "n2")
START_TIMEOUT_S = 30.0  # both nodes idle after about 1 s on this machine kind
STOP_TIMEOUT_S = 10.0  # SIGTERM, then SIGKILL after this long
SBIN = ("/usr/sbin", "/sbin")


class ClusterError(RuntimeError):
    """The cluster could not be started; the message names the daemon and the end of its log."""


def unavailable_reason() -> str | None:
    """Why a cluster cannot run here (None when it can): not root, or Slurm/MUNGE not installed."""
    if os.geteuid() != 0:
        return "the Slurm test cluster needs root (slurmd launches jobs as the submitting user)"
    for user in ("slurm", "munge"):
        try:
            pwd.getpwnam(user)
        except KeyError:
            return f"no '{user}' user: install Slurm with tests/slurm/install.sh"
    missing = [name for name in ("munged", "slurmctld", "slurmd", "sbatch", "setpriv") if not _which(name)]
    if missing:
        return f"missing {', '.join(missing)}: install Slurm and MUNGE with tests/slurm/install.sh"
    return None


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path=os.pathsep.join(SBIN))


def free_ports(count: int) -> list[int]:
    """Ports nothing listens on now (chosen by the kernel, so two clusters never share one)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def slurm_conf(base: Path, ctld_port: int, node_ports: dict[str, int], munge_socket: Path) -> str:
    """The cluster's slurm.conf: one partition over the emulated nodes, one CPU each."""
    state = base / "state"
    lines = [
        "ClusterName=tprimat-test",
        "SlurmctldHost=localhost",
        f"SlurmctldPort={ctld_port}",
        "SlurmUser=slurm",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket}",
        f"StateSaveLocation={state}/ctld",
        f"SlurmdSpoolDir={state}/%n",
        f"SlurmctldPidFile={state}/slurmctld.pid",
        f"SlurmdPidFile={state}/slurmd-%n.pid",
        f"SlurmctldLogFile={base}/log/slurmctld.log",
        f"SlurmdLogFile={base}/log/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "MpiDefault=none",
        "ReturnToService=2",
        "SlurmdTimeout=10",  # a node that stops answering is DOWN within about 30 s (slurmctld checks periodically)
        "KillWait=5",
        "MinJobAge=600",  # finished jobs stay visible to scontrol long enough to read their exit code
    ]
    lines += [f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs=1 RealMemory=2000"
              for name, port in node_ports.items()]
    lines.append(f"PartitionName=debug Nodes={','.join(node_ports)} Default=YES State=UP MaxTime=INFINITE")
    return "\n".join(lines) + "\n"


@dataclass
class SlurmCluster:
    """Start with start(), stop with stop() (idempotent); env() is what clients need."""

    base: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tprimat-slurm-")))
    nodes: tuple[str, ...] = NODES
    pids: dict[str, int] = field(default_factory=dict)
    _procs: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)

    @property
    def conf(self) -> Path:
        return self.base / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.base / "munge-socket" / "munge.socket"

    def env(self, base: dict | None = None) -> dict[str, str]:
        """An environment whose Slurm commands talk to this cluster."""
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.conf)
        env["PATH"] = os.pathsep.join([env.get("PATH", ""), *SBIN])
        return env

    def log(self, daemon: str) -> Path:
        return self.base / "log" / (f"{daemon}.log" if daemon in ("slurmctld", "munged") else f"slurmd-{daemon}.log")

    def start(self) -> "SlurmCluster":
        """munged, slurmctld, the slurmds; returns once every node is idle, else stops all and raises."""
        try:
            self._prepare()
            self._start_munged()
            self._spawn("slurmctld", [_which("slurmctld"), "-D", "-f", str(self.conf)])
            for node in self.nodes:
                self._spawn(node, [_which("slurmd"), "-D", "-N", node, "-f", str(self.conf)])
            self._wait_idle()
        except BaseException:
            self.stop()
            raise
        return self

    def _prepare(self) -> None:
        self.base.chmod(0o755)  # munge and slurm traverse it; their own subdirectories stay private
        (self.base / "log").mkdir()
        state = self.base / "state"
        (state / "ctld").mkdir(parents=True)
        munge = self.base / "munge"  # key, seed, log and pid: munge's alone
        munge.mkdir(mode=0o700)
        (self.base / "munge-socket").mkdir(mode=0o755)  # every client connects here
        key = munge / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o400)
        ids = {user: pwd.getpwnam(user) for user in ("slurm", "munge")}
        for path in (munge, key, self.base / "munge-socket"):
            os.chown(path, ids["munge"].pw_uid, ids["munge"].pw_gid)
        for path in (self.base / "log", state, state / "ctld"):
            os.chown(path, ids["slurm"].pw_uid, ids["slurm"].pw_gid)
        ctld_port, *node_ports = free_ports(1 + len(self.nodes))
        self.conf.write_text(slurm_conf(self.base, ctld_port, dict(zip(self.nodes, node_ports)),
                                        self.munge_socket))

    def _start_munged(self) -> None:
        munge = self.base / "munge"
        self._spawn("munged", ["setpriv", "--reuid=munge", "--regid=munge", "--init-groups", _which("munged"), "-F",
                               f"--socket={self.munge_socket}", f"--key-file={munge / 'munge.key'}",
                               f"--pid-file={munge / 'munged.pid'}", f"--seed-file={munge / 'munged.seed'}",
                               f"--log-file={munge / 'munged.log'}"])
        self._wait_for(self.munge_socket.exists, "munged", "its socket to appear")

    def _spawn(self, name: str, argv: list[str]) -> None:
        out = open(self.base / "log" / f"{name}.console", "wb")
        with out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env=self.env(), start_new_session=True)
        self._procs[name] = proc
        self.pids[name] = proc.pid

    def node_states(self) -> dict[str, str]:
        """Node name -> state as sinfo reports it (idle, alloc, down*, ...); empty while unanswered."""
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True,
                             env=self.env(), timeout=10)
        return dict(line.split() for line in out.stdout.splitlines() if len(line.split()) == 2)

    def _wait_idle(self) -> None:
        self._wait_for(lambda: all(self.node_states().get(n) == "idle" for n in self.nodes),
                       "the cluster", f"nodes {', '.join(self.nodes)} to be idle")

    def _wait_for(self, ready, who: str, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            dead = [name for name, proc in self._procs.items() if proc.poll() is not None]
            if dead:
                raise ClusterError(f"{dead[0]} exited with code {self._procs[dead[0]].returncode} while waiting for "
                                   f"{what}:\n{self.tail(dead[0])}")
            if ready():
                return
            time.sleep(0.2)
        raise ClusterError(f"{who}: no {what} within {START_TIMEOUT_S:.0f} s\n"
                           + "\n".join(self.tail(name) for name in self._procs))

    def tail(self, name: str, lines: int = 15) -> str:
        """The end of a daemon's console and log file, for error messages."""
        text = []
        for path in (self.base / "log" / f"{name}.console", self.log(name), self.base / "munge" / "munged.log"):
            if path.exists() and (name == "munged" or path.parent.name == "log"):
                text += [f"--- {path}"] + path.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(text)

    def kill_node(self, node: str) -> None:
        """Stop one slurmd (SIGKILL): the node stops answering, as a crashed machine would."""
        self._signal(node, signal.SIGKILL)
        self._procs[node].wait(timeout=STOP_TIMEOUT_S)

    def revive_node(self, node: str) -> None:
        """Start a killed node's slurmd again and wait until it is idle (ReturnToService=2)."""
        self._spawn(node, [_which("slurmd"), "-D", "-N", node, "-f", str(self.conf)])
        self._wait_idle()

    def stop(self) -> None:
        """Cancel every job, stop the daemons (slurmds, slurmctld, munged) by their pids, then end
        what a killed node left behind (its slurmstepd and tasks, found by this cluster's SLURM_CONF)."""
        if "slurmctld" in self._procs and self._procs["slurmctld"].poll() is None:
            subprocess.run(["scancel", "--full", "--user", pwd.getpwuid(os.geteuid()).pw_name],
                           capture_output=True, env=self.env(), timeout=10)
        for name in [*self.nodes, "slurmctld", "munged"]:
            self._signal(name, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for name, proc in list(self._procs.items()):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._signal(name, signal.SIGKILL)
                proc.wait(timeout=STOP_TIMEOUT_S)
        self._procs.clear()
        for pid in self.leftover_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def leftover_pids(self) -> list[int]:
        """Processes other than this one whose environment points at this cluster's slurm.conf."""
        marker = f"SLURM_CONF={self.conf}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
        return found

    def _signal(self, name: str, sig: signal.Signals) -> None:
        proc = self._procs.get(name)
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, sig)


def main() -> int:
    reason = unavailable_reason()
    if reason:
        print(f"cannot start a test cluster: {reason}", file=sys.stderr)
        return 2
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    cluster = SlurmCluster().start()
    try:
        print(f"two-node cluster up ({', '.join(cluster.nodes)}); in another shell:\n"
              f"  export SLURM_CONF={cluster.conf}\nCtrl-C stops it", flush=True)
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        cluster.stop()
        shutil.rmtree(cluster.base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
