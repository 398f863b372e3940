"""The machine behind a number (config.env's Machine section): telemetry during every run, node health before the
first, the device a plan is made for, what the comparison turns the figures into (energy, cost, a projection), and
the results store that keeps every result over time (evaluate/history/)."""

from __future__ import annotations

import math

from utils.config.parse import Knob
from utils.machine.hardware import TARGET_DEVICES

FLOOR = Knob("float", high=1, rule="a fraction of the device's specification (0: never fails)")
PRICE = Knob("float", high=math.inf, bounds="(]", optional=True, rule="a price per GPU-hour in any currency")

KNOBS = {
    "TELEMETRY": Knob("bool"),
    "TELEMETRY_INTERVAL_MS": Knob("int", low=100, high=60_000, rule="milliseconds between two samples of every GPU"),
    "HEALTH": Knob("enum", ("warn", "strict", "off")),
    "ACCEPTANCE": Knob("enum", ("strict", "warn", "off")),
    "ACCEPT_GEMM_FLOOR": FLOOR,
    "ACCEPT_MEMORY_FLOOR": FLOOR,
    "ACCEPT_BUSBW_FLOOR": FLOOR,
    "TARGET_DEVICE": Knob("enum", ("", *TARGET_DEVICES)),
    "SKIP_WONT_FIT": Knob("bool"),
    "PRICE_PER_GPU_HOUR_AMD": PRICE,
    "PRICE_PER_GPU_HOUR_NVD": PRICE,
    "PROJECT_TOKENS": Knob("float", high=1e18, bounds="(]", optional=True, rule="a token count such as 1e12"),
    # A password in the URL (user:pw@ or ?password=) is refused by the rule of every knob (utils.url_secrets): libpq
    # reads it from PGPASSWORD or ~/.pgpass instead.
    # Any letter a file name may hold (a store beside a default OUTPUT_DIR under /home/jürgen), no space or control
    # character.
    "HISTORY_DB": Knob("str", pattern=r"[^\s\x00-\x1f\x7f-\x9f]*",
                       rule="empty (OUTPUT_DIR/history.sqlite), a file path without spaces, or a postgresql:// URL "
                            "without a password (give it in PGPASSWORD or ~/.pgpass)", conceals=True),
    "PRECISION_LOSS_TOLERANCE": Knob("float", high=1, optional=True,
                                     rule="the relative validation-loss gap to BF16 a low precision may have (0.01: 1%)"),
}

