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
