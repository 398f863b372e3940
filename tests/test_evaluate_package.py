"""The evaluate package is TPrimat's own (it shadows Hugging Face's `evaluate`) and each tool answers --help."""

import subprocess
import sys
from pathlib import Path

import pytest

import evaluate

ROOT = Path(__file__).resolve().parent.parent


def test_evaluate_resolves_to_the_repository():
    assert Path(evaluate.__file__).resolve().parent == ROOT / "evaluate"


@pytest.mark.parametrize("tool", ["extract", "judge", "validate", "probe", "fingerprint", "compare", "wrap",
                                  "health", "project", "history"])
def test_each_tool_has_help(tool):
    out = subprocess.run([sys.executable, "-m", f"evaluate.{tool}", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: python3 -m evaluate.{tool}")
