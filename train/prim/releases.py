"""What differs between the Primus releases TPrimat runs (a stack's `primus`, utils/spec/stacks.py): one row each.

The experiment's keys are the same in both releases (every key TPrimat writes is in both releases' presets:
tests/test_train_prim_config.py); what differs is where the checkout comes from and how a pretrain starts.

- v25.11 (rocm/primus:v25.11): the image's own checkout, started with `examples/run_pretrain.sh` and EXP.
- v26.5 (rocm/primus:v26.5): its release notes say to run a `release/v26.5` checkout, not the image's
  /workspace/Primus (built from the branch's v26.5.0 commit b511d1b6, behind its tip ca7ddda3), and to start a
  pretrain with Primus CLI 1.0, `primus-cli direct -- train pretrain --config EXP` inside the container.
  Nothing in it may pip-install: PRIMUS_SKIP_PIP=1 is Primus's switch (examples/run_pretrain.sh reads it from
  v26.5.1 on), and the release's primus-cli has none, while its Megatron pretrain hook pip-installs
  flash-linear-attention and causal-conv1d at every launch; PIP_NO_INDEX=1 lets those pip calls only confirm what
  the image holds, so a package the image lacks stops the run before training instead of being downloaded.
  (PRIMUS_STRICT_REQUIREMENTS=1 would make its requirements check fatal, but that check counts the
  `git+https://...mlcommons/logging` line of requirements.txt as missing whatever the image holds.)
- v25.11 has no switch (utils/upstream/table.py): examples/run_pretrain.sh:87-92 runs `pip install -r
  requirements.txt` (unpinned torchao, mlflow==3.4.0, datasets>=3.6.0) and examples/megatron/prepare.py:173
  `pip install -e third_party/Emerging-Optimizers` with check=True at every launch. pip's own settings make both install nothing: PIP_NO_INDEX=1 (nothing is
  downloaded), PIP_DRY_RUN=1 (pip resolves and says what it would install, installing nothing: the editable
  Emerging-Optimizers, which Primus imports only for Muon, is never rebuilt into site-packages) and
  PIP_NO_BUILD_ISOLATION=0 (pip's inverted switch: build isolation off, so that dry run reads the checkout's
  metadata with the image's setuptools instead of fetching setuptools from PyPI and failing the launch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from utils.frameworks.prim.checkout import CHECKOUTS as PRIMUS_CHECKOUTS

REPOSITORY = "https://github.com/AMD-AGI/Primus.git"
# pip's settings under which a launcher's `pip install` (of requirements or of a local checkout) installs nothing.
NO_INSTALL = MappingProxyType({"PIP_NO_INDEX": "1", "PIP_DRY_RUN": "1", "PIP_NO_BUILD_ISOLATION": "0"})


@dataclass(frozen=True)
class Release:
    name: str  # a stack's `primus`, e.g. "v26.5"
    checkout: str  # the checkout used when PRIMUS_PATH is unset (utils/frameworks/prim/checkout.py, CHECKOUTS)
    marker: str  # the file that makes a directory a checkout of this release: its launcher
    get_checkout: str  # how to get that checkout, for the line that says it is missing
    launcher: tuple[str, ...]  # the pretrain command run from the checkout: {exp} the experiment, {log} its log
    env: Mapping[str, str] = field(default_factory=dict)  # the launcher's own switches ({exp}, {log} as above)
    source: str = ""  # where these facts were read
    # The switch that makes every evaluation read the same first eval_iters x GBS validation samples (TPrimat's
    # definition, utils/spec/evaluation.py); empty: Megatron-LM reads the next ones at each evaluation
    same_validation_samples: Mapping[str, str] = field(default_factory=dict)
    # The launcher shows only local rank 0 on a single node (torchrun --local-ranks-filter 0) and reads extra torchrun
    # arguments from LOCAL_RANKS after its own: TPrimat shows the last local rank too, whose validation reports (and
    # own iteration lines) Primus does not forward to rank 0 (utils/upstream/table.py: primus-v26.5 "local ranks filter").
    filters_to_rank_0: bool = False


ROWS = (
    Release(name="v26.5", checkout=PRIMUS_CHECKOUTS["v26.5"][0], marker=PRIMUS_CHECKOUTS["v26.5"][1],
            get_checkout=f"git clone --branch release/v26.5 --recurse-submodules {REPOSITORY} "
                         f"{PRIMUS_CHECKOUTS['v26.5'][0]}",
            launcher=("bash", "./primus-cli", "direct", "--log_file", "{log}", "--",
                      "train", "pretrain", "--config", "{exp}"),
            env=MappingProxyType({"PRIMUS_SKIP_PIP": "1", **NO_INSTALL}),
            source="Primus release/v26.5 at ca7ddda3 (runner/primus-cli-direct.sh, runner/helpers/hooks/train/pretrain/"
                   "megatron/00_install_requirements.sh, primus/backends/megatron/patches/"
                   "validation_data_sampling_patches.py); docs/01-getting-started/release-notes.md at main 0c279c53; "
                   "examples/run_pretrain.sh at v26.5.1 (9a86ba8c)",
            same_validation_samples=MappingProxyType({"PRIMUS_MLPERF": "1"}), filters_to_rank_0=True),
    Release(name="v25.11", checkout=PRIMUS_CHECKOUTS["v25.11"][0], marker=PRIMUS_CHECKOUTS["v25.11"][1],
            get_checkout=f"use the rocm/primus:v25.11 image, whose checkout is {PRIMUS_CHECKOUTS['v25.11'][0]}",
            launcher=("bash", "./examples/run_pretrain.sh"),
            env=MappingProxyType({"EXP": "{exp}", "TRAIN_LOG": "{log}", **NO_INSTALL}),
            source="Primus clairlee/release/v25.11 at 66bed3ce (examples/run_pretrain.sh, examples/megatron/prepare.py)"),
)

TABLE: Mapping[str, Release] = MappingProxyType({row.name: row for row in ROWS})


def of(primus: str | None) -> Release:
    """The row of a stack's Primus release; a stack without one (not AMD) has no Primus to run."""
    try:
        return TABLE[primus or ""]
    except KeyError:
        raise ValueError(f"no Primus release {primus!r} in train/prim/releases.py (known: {', '.join(TABLE)}); "
                         "choose an AMD stack with STACK") from None
