"""The lines every framework's log may hold, whatever its format: the evaluation report and TPrimat's TPRIMAT_STEP
line; and the timestamp of a step line. Each framework's own step lines are its format's
(utils.frameworks.log_format); evaluate.logs.stream feeds the lines, evaluate.logs.parse assembles the run.
"""

from __future__ import annotations

import re
import time

from evaluate.logs.formats import readers
from utils.frameworks.log_format import RECORD_START, record_fields

# Megatron-LM's and Megatron-Bridge's evaluation report (training.py / eval.py, evaluate_and_print_results; printed
# by the last rank with no timestamp), also printed by TPrimat's trainers and NeMo timer with the evaluation's
# seconds: " validation loss at iteration 50 | lm loss value: 6.1E+00 | lm loss PPL: 4.5E+02 |", the one after
# training "... at iteration 100 on validation set | ...". Another set's ("validation-0 loss at") is not read.
VALIDATION = re.compile(RECORD_START + r"\s*validation loss at iteration (\d+)(?: on validation set)?\s*\|")
VALIDATION_FIELDS = {"lm loss value": "loss", "evaluation time (s)": "eval_time_s",
                     "wall time since step 1 (s)": "wall_s"}  # the last two: TPrimat's line (train.common.evaluation)
STEP_MARKER = "TPRIMAT_STEP"  # train/common/step_timer.py: NeMo's and torchtitan's device-synchronised step time
# and every rank's peak memory
STEP_LINE = re.compile(RECORD_START + STEP_MARKER + r" (.*)$")


def validation_point(step: int, rest: str) -> dict:
    """One validation report -> {step, loss, eval_time_s, wall_s} (None where the line does not say)."""
    point = {"step": step, "loss": None, "eval_time_s": None, "wall_s": None}
    for kind, numbers in record_fields(rest, False, lambda name: VALIDATION_FIELDS.get(" ".join(name.split()))):
        point[kind] = numbers[0]
    return point


# The timestamp a step line's prefix carries (Megatron's "[2025-01-31 12:00:00]", Primus's "[20250131 12:00:00]",
# NeMo's "[NeMo I 2025-01-31 12:00:00 ...]"), in the node's local time, to the second.
STAMP = re.compile(r"\[(?:NeMo [IWDEC] )?(\d{4})-?(\d\d)-?(\d\d) (\d\d):(\d\d):(\d\d)")


def stamped_step(line: str) -> tuple[int, float] | None:
    """(step, its end in time.time() seconds, to the second) from a step line whose prefix has a timestamp: a
    step's line is printed as it ends."""
    for reader in readers():
        step = reader.format.step(line, True) if any(m in line for m in reader.format.markers) else None
        if step is not None:
            stamp = STAMP.search(step.head)
            if stamp is None:
                return None
            return step.record["step"], time.mktime((*map(int, stamp.groups()), 0, 0, -1))  # type: ignore[arg-type]
    return None
