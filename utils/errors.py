"""The two errors of the exit-code discipline (utils.cli.run): bad input (2) and a failure of the work (1).

Kept apart from utils.cli so that utils.files can raise a failure without importing the command-line layer.
Standard library only.
"""


class UsageError(Exception):
    """Bad input (arguments, files, configuration): exit 2."""


class WorkError(Exception):
    """The work itself failed (network, corrupt data, a broken invariant, a write the disk refused): exit 1."""
