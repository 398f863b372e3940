"""utils.missing_stacks: megatron-core's warnings that Transformer Engine and Apex are missing, ignored by exact
message, and the one line that says it instead."""

from __future__ import annotations

import importlib.util
import warnings

from utils import missing_stacks

# As megatron-core 0.12 to 0.19 word them (megatron/core/optimizer, megatron_fsdp, models/backends.py).
MEGATRON_WARNINGS = (
    "Transformer Engine and Apex are not installed. Falling back to Torch optimizers.",
    "Transformer Engine and Apex are not installed. Falling back to local implementations of multi_tensor_applier "
    "and multi_tensor_scale",
    "Transformer Engine and Apex are not installed. Falling back to local implementations of multi_tensor_applier, "
    "multi_tensor_l2norm, and multi_tensor_scale",
    "Apex is not installed. Falling back to Torch Norm",
)
OTHERS = ("CPU offload is recommended for PyTorch >= 2.3.0, untested versions below this may have convergence issues.",
          "Transformer Engine is not installed, and FP8 was asked for")


def test_silence_ignores_exactly_megatron_cores_not_installed_warnings():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        missing_stacks.silence()
        for message in (*MEGATRON_WARNINGS, *OTHERS):
            warnings.warn(message, UserWarning)
        warnings.warn(MEGATRON_WARNINGS[0], DeprecationWarning)  # another category is not theirs
    assert [str(w.message) for w in seen] == [*OTHERS, MEGATRON_WARNINGS[0]]


def test_the_notice_names_what_is_missing_and_why_that_is_expected_on_a_cpu(monkeypatch):
    present = {"transformer_engine"}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if name in present else None)
    assert missing_stacks.notice() == ("Apex not installed, as expected on a CPU (GPU kernel libraries): "
                                       "megatron-core uses its torch fallbacks, and the runs do not repeat its "
                                       "warnings about it")
    present.clear()
    assert missing_stacks.notice().startswith("Transformer Engine and Apex not installed, as expected on a CPU")
    present.update(missing_stacks.LIBRARIES)
    assert missing_stacks.notice() is None


def test_quiet_notes_ignores_exactly_megatron_cores_note_about_its_logger():
    note = ("absl.logging is not installed. Using logging.getLogger(__name__) instead. Please install absl.logging "
            "with `pip install absl-py` to use absl.logging.")  # as megatron-core 0.19 words it (hyper_comm_grid.py)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        missing_stacks.quiet_notes()
        for message in (note, *MEGATRON_WARNINGS[:1], *OTHERS):
            warnings.warn(message, UserWarning)
    assert [str(w.message) for w in seen] == [MEGATRON_WARNINGS[0], *OTHERS]
