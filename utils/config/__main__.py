"""`python3 -m utils.config check|env|json|get KEY`: the configuration, validated, for people and the shell."""

from __future__ import annotations

import argparse
import json
import shlex
import sys

import utils.config
from utils.config import CONFIG_FILE, PLATFORMS, ConfigError, describe, load_config, shell_exports, stack_of
from utils.config.parse import shell_value
from utils.secrets import load_secrets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m utils.config", description=utils.config.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("check", "env", "json", "get", "stack"))
    parser.add_argument("key", nargs="?", help="with get: the variable to print; with stack: the platform")
    parser.add_argument("--quiet", action="store_true", help="do not print notes or warnings")
    args = parser.parse_args(argv)
    if args.command == "stack":
        return _stack(args.key)
    try:
        config = load_config()
    except ConfigError as err:
        err.report()
        print(f"config: {len(err.problems)} problem(s) in {CONFIG_FILE.name} or the environment; "
              "nothing was started", file=sys.stderr)
        return 2
    if not args.quiet:
        for note in config.notes:
            print(f"note: {note}", file=sys.stderr)
        for warning in config.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    if args.command == "check":
        print("\n".join(describe(config, load_secrets())))
    elif args.command == "env":
        print("\n".join(shell_exports(config)))
    elif args.command == "json":
        print(json.dumps(config.as_dict(), indent=2))
    else:
        resolved = config.as_dict()
        if args.key not in resolved:
            print(f"config: unknown variable {args.key!r}; valid: {', '.join(resolved)}", file=sys.stderr)
            return 2
        print(shell_value(resolved[args.key]))
    return 0


def _stack(platform: str | None) -> int:
    """STACK_NAME and STACK_IMAGE of one platform's row, as export lines (shell/build.sh)."""
    if platform not in PLATFORMS:
        print(f"config: stack needs a platform: one of {', '.join(PLATFORMS)}", file=sys.stderr)
        return 2
    try:
        row = stack_of(platform)
    except ConfigError as err:
        err.report()
        return 2
    print(f"export STACK_NAME={shlex.quote(row.name)}\nexport STACK_IMAGE={shlex.quote(row.image or '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
