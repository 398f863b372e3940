"""The settings file of a framework whose recipe TPrimat builds inside its image (train/train_nemo.py,
train/train_mbridge.py): the entry point's one argument read, the file's environment applied before the framework is
imported (Transformer Engine reads its switches at import), and the dotted-path assignment both use to apply it."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from train.common import console


class SettingsError(ValueError):
    """A request this run cannot honour (exit 2)."""


def load(argv: list[str] | None, module: str, doc: str | None) -> dict | None:
    """The settings of `python3 -m <module> --settings FILE`, its "env" applied; None (said on stderr) when the
    file cannot be read."""
    parser = argparse.ArgumentParser(prog=f"python3 -m {module}", description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", type=Path, required=True, help="the run's settings file, written by its launch")
    args = parser.parse_args(argv)
    console.whole_lines()
    try:
        settings = json.loads(args.settings.read_text())
    except (OSError, json.JSONDecodeError) as err:
        print(f"{module.rsplit('.', 1)[-1]}: cannot read {args.settings}: {err}", file=sys.stderr)
        return None
    for key, value in settings["env"].items():
        os.environ.setdefault(key, value)
    return settings


def assign(root: object, path: str, value: object) -> None:
    """Set a dotted attribute path ("trainer.strategy.sequence_parallel") on a recipe or configuration."""
    *parents, leaf = path.split(".")
    target = root
    for name in parents:
        target = getattr(target, name)
    setattr(target, leaf, value)
