"""Where each Primus release's checkout is, and the check the probe makes before a prim run: Primus runs from a
checkout (its launcher and its Megatron-LM), not from an installed package the image imports."""

from __future__ import annotations

import os
from pathlib import Path

from utils import ROOT
from utils.spec.stacks import Stack

PATH_ENV = "PRIMUS_PATH"  # a checkout of the stack's release, over the release's own
DEFAULT_PRIMUS_PATH = "/workspace/Primus"  # where rocm/primus images hold their checkout
# Each Primus release's checkout where PRIMUS_PATH is unset, and the file that makes a directory a checkout of that
# release: the launcher TPrimat starts there (train/prim/releases.py), v26.5's primus-cli, which v25.11 lacks
# (utils/upstream/table.py: primus-v26.5 "checkout marker"), and v25.11's examples/run_pretrain.sh.
CHECKOUTS = {"v26.5": (str(ROOT / "third_party" / "primus-release-v26.5"), "primus-cli"),
             "v25.11": (DEFAULT_PRIMUS_PATH, "examples/run_pretrain.sh")}


def missing(release: str, primus_path: str | None = None) -> str | None:
    """Why there is no checkout of the Primus release at primus_path (else the release's own), or None: a checkout
    holds its release's launcher."""
    default, launcher = CHECKOUTS[release]
    primus = Path(primus_path or default)
    if (primus / launcher).is_file():
        return None
    return f"no Primus {release} checkout at {primus} ({PATH_ENV}; it holds {launcher})"


def stack_check(stack: Stack) -> str | None:
    """The registry entry's stack_check: the stack's release checked out where PRIMUS_PATH says, else its own."""
    return missing(stack.primus or "", os.environ.get(PATH_ENV))
