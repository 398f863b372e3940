"""The GPU kernel libraries a CPU run lacks: said once per run set, not by every process of every run.

megatron-core warns, as it is imported, that Transformer Engine and Apex are not installed (four warnings in
0.16 and 0.19). Every CPU process imports it: the mega trainer, the fsdp and autotp trainers (their data is its
GPTDataset) and data.verify, so a first CPU run printed the same warnings from each worker of each run. On the
CPU platform that is expected: both are CUDA/ROCm kernel libraries, megatron-core falls back to its torch
implementations (what a CPU run measures), and each result's features still say that TE is not used. So
train.matrix says it once (notice), and those processes ignore exactly these warnings (silence); a GPU run's
workers filter nothing, as a missing TE there is news. Standard library only: the matrix imports no torch.
"""

from __future__ import annotations

import importlib.util
import re
import warnings

LIBRARIES = {"transformer_engine": "Transformer Engine", "apex": "Apex"}  # importable name -> name
# The warnings' opening words as megatron-core 0.12 to 0.19 spell them; the rest names the fallback.
MESSAGES = ("Transformer Engine and Apex are not installed. Falling back to ",
            "Apex is not installed. Falling back to Torch Norm")


# megatron-core 0.19's note, as its process-group grid is imported, that it logs through the logging module for want of
# absl: a choice of logger, not a library any run needs, so it is ignored on every platform (quiet_notes).
NOTES = ("absl.logging is not installed. Using logging.getLogger(__name__) instead.",)


def missing() -> list[str]:
    """The libraries of LIBRARIES this Python cannot import."""
    return [name for module, name in LIBRARIES.items() if importlib.util.find_spec(module) is None]


def notice() -> str | None:
    """The one line a CPU run set prints instead of its workers' warnings; None when nothing is missing."""
    absent = missing()
    if not absent:
        return None
    return (f"{' and '.join(absent)} not installed, as expected on a CPU (GPU kernel libraries): megatron-core "
            "uses its torch fallbacks, and the runs do not repeat its warnings about it")


def silence() -> None:
    """Ignore megatron-core's not-installed warnings, and only them, in this process."""
    for message in MESSAGES:
        warnings.filterwarnings("ignore", message=re.escape(message), category=UserWarning)


def quiet_notes() -> None:
    """Ignore megatron-core's NOTES, and only them, in this process (before megatron-core is imported)."""
    for message in NOTES:
        warnings.filterwarnings("ignore", message=re.escape(message), category=UserWarning)
