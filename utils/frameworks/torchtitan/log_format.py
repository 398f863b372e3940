"""torchtitan 0.3.0's log: its metrics line, the settings its trainer prints, and TPrimat's TPRIMAT_STEP line from
its step timer (train/torchtitan/trainer.py: the step time and every rank's peak memory the metrics line lacks)."""

from __future__ import annotations

import re

from utils.frameworks.log_format import RANK_LABEL, LogFormat, Step, new_record

# components/metrics.py, MetricsProcessor.log, through tools/logging.py's "[titan] %(asctime)s - %(name)s -
# %(levelname)s - " format: "step:  1  loss: 12.25000  grad_norm:  3.1416  memory: 10.50GiB(13.27%)  tps: 6,123
# tflops: 300.12  mfu: 30.35%", fields two spaces apart. Its validation line ("validate step:") is no step.
STEP = re.compile(RANK_LABEL + r"\[titan\] \d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ - \S+ - INFO - step:\s*(\d+)\b")
FIELD = re.compile(r"(\w+): +(\S+)")
# torchtitan's field -> the record's key: its loss and grad norm, and as raw figures its tokens/s per device, TFLOP/s
# (its own FLOPs convention), MFU and rank 0's peak reserved memory since the previous line.
FIELDS = {"loss": "loss", "grad_norm": "grad_norm", "tps": "fw_tokens_per_s_per_gpu",
          "tflops": "fw_tflop_per_s_per_gpu", "mfu": "fw_mfu_pct", "memory": "fw_mem_reserved_gib"}
NUMBER = re.compile(r"^([-+]?(?:[\d,]+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)(?:GiB\([\d.]+%\)|%)?$", re.IGNORECASE)
# trainer.py, Trainer.__init__: "Trainer is initialized with local batch size 1, global batch size 64, gradient
# accumulation steps 8, sequence length 8192, total steps 50 (warmup 5)".
TRAINER = re.compile(r"Trainer is initialized with local batch size (\d+), global batch size (\d+), gradient "
                     r"accumulation steps (\d+), sequence length (\d+), total steps (\d+) \(warmup (\d+)\)")
TRAINER_FIELDS = ("mbs", "gbs", "ga", "seq_len", "steps", "warmup_steps")


def step(text: str, complete: bool) -> Step | None:
    """One metrics line -> its step (its total is the trainer's printed steps); a value that is no whole number (cut,
    glued, "N/A") is left out, and so is the last field of a line cut off."""
    match = STEP.match(text)
    if match is None:
        return None
    rest = text[match.end():]
    record = new_record(int(match.group(1)))
    pairs = FIELD.findall(rest)
    for name, raw in pairs if complete else pairs[:-1]:
        key, number = FIELDS.get(name), NUMBER.match(raw)
        if key and number:
            record[key] = float(number.group(1).replace(",", ""))
    return Step(record, None, None, match.group(0), rest)


def printed(text: str, settings: dict) -> None:
    found = TRAINER.search(text)
    if found:
        settings.update(zip(TRAINER_FIELDS, map(int, found.groups())))


def untimed(records: list[dict]) -> str:
    return ("no TPRIMAT_STEP line: torchtitan's metrics line has no step time (only its host-clock tokens/s per "
            "device, kept as a raw figure), so the steps have none")


FORMAT = LogFormat(markers=("[titan]",), step=step, printed=printed, untimed=untimed)
