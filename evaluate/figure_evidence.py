"""Which check recomputes each figure field of result.json from its evidence, and which fields are not recomputed yet.

Every number-typed field of the figure sections (FIGURE_SECTIONS) of utils/spec/result.schema.json is in exactly one
of the two tables: RECOMPUTED names the function of evaluate/ that recomputes (or bounds against its evidence) the
field whenever a result is read, NOT_YET says, field by field, what is still taken on the writer's word and how far
it is checked. tests/test_faults_evaluation_evidence.py walks the schema: a new figure field in neither table fails
CI, so it arrives with its check or with its gap stated here; moving a field from NOT_YET to RECOMPUTED is how a gap
closes.
"""

from __future__ import annotations

from evaluate import evaluation_checks, prediction_checks, series_checks, telemetry_checks

FIGURE_SECTIONS = ("performance", "memory", "telemetry", "prediction", "stragglers", "evaluation", "time_to_train")

# field -> "module.function" under evaluate/ that recomputes it from the steps, points, request or device table
RECOMPUTED = {
    **{field: f"evaluation_checks.{check}" for field, check in evaluation_checks.FIGURE_EVIDENCE.items()},
    "performance.warmup_skip": "integrity.window",
    **{f"telemetry.{field}": "telemetry_checks.problems" for field in telemetry_checks.FIGURES},
    **{f"telemetry.per_gpu.{field}": "telemetry_checks.problems" for field in telemetry_checks.GPU_FIGURES},
    **{f"telemetry.throttle_events.{field}": "telemetry_checks.problems" for field in telemetry_checks.EVENT_FIGURES},
    **dict.fromkeys(("performance.tokens_per_step", "performance.tokens_per_s", "performance.tokens_per_s_per_gpu",
                     "performance.flops_per_token", "performance.tflop_per_s_per_gpu", "performance.mfu",
                     "performance.peak_tflop_per_s_per_gpu"), "validate._figures"),
    **{f"performance.breakdown.{key}": "series_checks.breakdown" for key in series_checks.BREAKDOWN_FIELDS},
    **{f"memory.{key}": "series_checks.peaks" for key in series_checks.PEAK_SERIES},
    **{f"performance.expert_load.{key}": "series_checks.expert_load" for key in series_checks.EXPERT_LOAD_FIELDS},
    **{f"prediction.{field}": "prediction_checks.problems" for field in prediction_checks.FIGURES},
    **dict.fromkeys(("stragglers.threshold", "stragglers.median", "stragglers.members.index",
                     "stragglers.members.rank", "stragglers.members.value", "stragglers.slowest.index",
                     "stragglers.slowest.rank", "stragglers.slowest.value", "stragglers.slowest.slower_than_median",
                     "stragglers.slowest_node.value", "stragglers.slowest_node.median",
                     "stragglers.slowest_node.slower_than_median"), "straggler_checks.problems"),
}

_DEVICE_USED = "never below 0 and never above the device's capacity (integrity.below_zero, integrity.memory); the " \
               "driver's per-step readings it is the peak of are not kept in the result's series"
_PER_WORKER = "never below 0 and never above the host's memory (integrity.below_zero, integrity.memory); each " \
              "worker's peak is read from its own process, which a result does not carry"
NOT_YET = {
    "memory.peak_device_used_gib": _DEVICE_USED, "memory.host_rss_gib_per_worker": _PER_WORKER,
    "telemetry.interval_ms": "the request's TELEMETRY_INTERVAL_MS, an input of the summary that validate recomputes "
                             "the section with, not one of its outputs; each node's own interval is in its samples",
}
