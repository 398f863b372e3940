"""What every TPrimat tool shares: the repository root, and subpackages by domain.

`config/` (every knob, typed, its rules beside it), `spec/` (the specification of a run: models, strategies,
fairness, request, result, metrics), `frameworks/` (the framework registry), `machine/` (what the machine is and
does: probe, the GPU readers, node health, telemetry, energy), `predict/` (memory and step time before a run); at
the top, the small helpers every tool uses (cli, errors, files, secrets, datafiles, fingerprint, runset).
Importing it changes nothing: the entry points install utils.cli's exception hook themselves.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
