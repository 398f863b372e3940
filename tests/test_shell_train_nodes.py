"""shell/train.sh on a node other than 0 of a multi-node CPU run: node 0 alone prepares the missing
sample corpus; the others wait for its verified manifests, for a bounded time.

The data stage is a stand-in that records being called, so a test can show who prepares the data;
node 0 itself is played by the test writing the prepared DATA_DIR (tests/fixtures/train/data_dir.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

from tests.fixtures.train.data_dir import make_data_dir
from tests.fixtures.train_matrix.shell import machine
from tests.shell_harness import HANG_TIMEOUT_S

SECOND_NODE = {"NNODES": "2", "GPUS_PER_NODE": "1", "NODE_RANK": "1", "MASTER_ADDR": "127.0.0.1",
               "LAUNCHER": "local", "HF_HUB_OFFLINE": "1"}
DATA_STAGE = '#!/usr/bin/env bash\necho "data stage called on node ${NODE_RANK}" >> "${DATA_DIR}.calls"\n'


def second_node(tmp_path):
    fake = machine(tmp_path)
    (fake.root / "shell" / "data.sh").write_text(DATA_STAGE)
    return fake


def test_a_node_other_than_0_never_prepares_the_data_and_gives_up_with_the_reason(tmp_path):
    fake = second_node(tmp_path)
    started = time.monotonic()
    result = fake.run("shell/train.sh", TPRIMAT_DATA_WAIT_S="0", **SECOND_NODE)
    assert result.returncode == 1, result.output[-2000:]
    assert time.monotonic() - started < 60
    assert "node 1: node 0's verified sample data did not appear" in result.stderr
    assert "DATA_DIR must be on a filesystem every node shares" in result.stderr
    assert not (tmp_path / "data.calls").exists() and not (tmp_path / "output").exists()


def test_a_node_other_than_0_goes_on_once_node_0_has_prepared_the_data(tmp_path):
    fake = second_node(tmp_path)
    proc = subprocess.Popen(["bash", str(fake.root / "shell/train.sh")], cwd=fake.root,
                            env={**fake.env, **SECOND_NODE, "TPRIMAT_DATA_WAIT_S": "120"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            lines.append(line)
            if "waiting up to 120 s" in line:
                make_data_dir(tmp_path / "data", documents=20)  # node 0 finishing shell/data.sh
            if "the sample corpus is ready" in line:
                ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert ready.wait(timeout=HANG_TIMEOUT_S), "".join(lines)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # stop before the run's rendezvous with a node 0 that is not there
        proc.wait(timeout=60)
        reader.join(timeout=10)
    assert not (tmp_path / "data.calls").exists()
