"""Fixtures that more than one test file uses."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

FAKES = Path(__file__).parent / "fakes"


@pytest.fixture
def gpus(tmp_path, monkeypatch):
    """Describe the node's GPUs: the fake pynvml and amdsmi (tests/fakes, first on the path) answer from this scenario
    (its format: tests/fakes/fake_gpus.py)."""
    def describe(*specs: dict) -> Path:
        path = tmp_path / "gpus.json"
        path.write_text(json.dumps({"gpus": list(specs)}))
        monkeypatch.setenv("TPRIMAT_FAKE_GPUS", str(path))
        return path
    monkeypatch.syspath_prepend(str(FAKES))
    for name in ("pynvml", "amdsmi", "fake_gpus"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return describe


# The files with the longest summed test time (--durations=0 with -n 2 --dist loadfile on a 2-core machine), longest
# first. Under --dist loadfile a worker takes the next file of the queue when it is done with one; by default xdist
# orders the queue by the number of tests in a file, which put the long files of a few tests each (the trained run
# sets) last, where one could run alone while the other worker sat idle. shell/test.sh keeps the collection order
# (--no-loadscope-reorder), so these go first and the short files even out the workers' ends.
LONGEST_FIRST = ("test_train_mega_runs.py", "test_megatron_versions.py", "test_train_fsdp_runs.py",
                 "test_train_mbridge_cpu.py", "test_slurm_cluster.py", "test_utils_predict_measured.py",
                 "test_entry_points.py", "test_train_autotp_runs.py", "test_shell_train_matrix.py",
                 "test_train_tied_model_runs.py", "test_train_torchtitan.py", "test_train_torchtitan_cpu.py",
                 "test_signals.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's tests keep their order
