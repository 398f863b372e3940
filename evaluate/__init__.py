"""TPrimat's evaluation tools: extract, judge (a run once it has ended), validate, compare, wrap, probe, fingerprint,
health (the node before a run) and project (one result to many nodes).

Run as modules from the repository root (python3 -m evaluate.extract ...). Log reading lives in `logs/`, what compare
makes of a set of results in `comparison/`; `collect`, `machine_checks` and `native_settings` serve several commands.
The name shadows Hugging Face's `evaluate` library on purpose; TPrimat never needs that library.
"""

from utils.cli import install_excepthook

install_excepthook()  # before any tool of the package imports a third-party library
