"""Run TPrimat's shell scripts for real against fake vendor tools, in a throwaway copy of the repo.

The copy keeps tests from touching the developer's secrets.env or output/; the fakes in
tests/fakebin record every call to a log file so tests can assert the exact invocations.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FAKEBIN = REPO / "tests" / "fakebin"
COPIED = ("shell", "utils", "config.env", "secrets.env.example", "amd.Dockerfile", "nvd.Dockerfile",
          "requirements", ".shellcheckrc")
SECRET_VALUE = "hf_TESTSECRETdoNotLeak0123456789"
# The timeout of every test that trains or runs a script: a safety net against a hang, never a speed check,
# so far above what the work needs on a slow, loaded 2-core machine (the slowest test takes ~75 s on one
# without bf16 instructions); bench.default shows the speed.
HANG_TIMEOUT_S = 1800


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    calls: list[list[str]]

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def calls_of(self, tool: str, sub: str | None = None) -> list[list[str]]:
        return [c for c in self.calls if c[0] == tool and (sub is None or (len(c) > 1 and c[1] == sub))]


class FakeMachine:
    """A repository copy plus a PATH whose nvidia-smi, rocm-smi, amd-smi and docker are fakes."""

    def __init__(self, tmp: Path, *, nvidia: int = 0, amd: int = 0, engine: bool = False, secrets: bool = True):
        self.root = tmp / "repo"
        self.root.mkdir()
        for name in COPIED:
            source = REPO / name
            if source.is_dir():
                shutil.copytree(source, self.root / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, self.root / name)
        if secrets:
            (self.root / "secrets.env").write_text(f"HF_TOKEN={SECRET_VALUE}\n")
        self.log = tmp / "calls.log"
        self.env = {
            "PATH": f"{FAKEBIN}:{os.environ['PATH']}",
            "HOME": str(tmp / "home"),
            "FAKE_LOG": str(self.log),
            "FAKE_NVIDIA_GPUS": str(nvidia),
            "FAKE_AMD_GPUS": str(amd),
            "FAKE_DOCKER_ENGINE": "1" if engine else "0",
            "TPRIMAT_KFD": str(tmp / "no-kfd"),
            "TPRIMAT_INFINIBAND": str(tmp / "no-infiniband"),
            "TPRIMAT_VENV": str(REPO / ".venv"),
            "DATA_DIR": str(tmp / "data"),
            "OUTPUT_DIR": str(tmp / "output"),
            "HF_HOME": str(tmp / "hf"),
            "HF_HUB_OFFLINE": "1",
            # A fake GPU cannot be measured, and the real CPU stage costs seconds a run: its own tests run it
            # (tests/test_evaluate_acceptance.py)
            "ACCEPTANCE": "off",
        }

    def run(self, script: str, *args: str, cwd: Path | None = None, **env: str) -> Result:
        self.log.write_text("")
        proc = subprocess.run(["bash", str(self.root / script), *args], cwd=cwd or self.root,
                              env={**self.env, **env}, capture_output=True, text=True, timeout=HANG_TIMEOUT_S)
        calls = [shlex.split(line) for line in self.log.read_text().splitlines() if line.strip()]
        return Result(proc.returncode, proc.stdout, proc.stderr, calls)
