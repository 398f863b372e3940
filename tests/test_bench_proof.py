"""bench.proof: the cost of proving a pair, measured here and extrapolated to a 20 GB pair."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_it_prints_the_full_and_remembered_proof_and_how_to_reproduce(tmp_path):
    out = subprocess.run([sys.executable, "-m", "bench.proof", "--size-gib", "0.01", "--repeat", "1", "--dir",
                          str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "machine: " in out.stdout and "full sha256, page cache (warm): " in out.stdout
    assert "-> a 20 GB pair: " in out.stdout and "remembered proof" in out.stdout
    assert "reproduce: python3 -m bench.proof" in out.stdout
    assert list(tmp_path.iterdir()) == []  # the pair it wrote is gone


def test_help_says_what_it_measures():
    out = subprocess.run([sys.executable, "-m", "bench.proof", "--help"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0 and "20 GB" in out.stdout and "--prefix" in out.stdout
