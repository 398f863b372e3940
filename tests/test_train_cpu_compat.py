"""train.common.cpu_compat.quiet: megatron-core's warnings that Transformer Engine and Apex are missing are ignored on the
CPU platform only, where train.matrix says it once; on a GPU platform the process still prints them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.shell_harness import HANG_TIMEOUT_S, REPO

IMPORT = "import sys; from train.common import cpu_compat; cpu_compat.quiet(sys.argv[1]); import megatron.core.optimizer"


@pytest.mark.parametrize("platform, printed", [("cpu", False), ("nvd", True), ("amd", True)])
def test_megatron_cores_missing_library_warnings_are_left_out_on_the_cpu_only(platform, printed):
    run = subprocess.run([sys.executable, "-c", IMPORT, platform], cwd=REPO, capture_output=True, text=True,
                         timeout=HANG_TIMEOUT_S)
    assert run.returncode == 0, run.stderr
    assert ("Transformer Engine and Apex are not installed" in run.stderr) is printed, run.stderr
