"""The secrets TPrimat knows: every KEY=VALUE of secrets.env, and HF_TOKEN from the environment too.

They are never printed, only passed on, and always as TPrimat's own parser (utils.envfile) reads them:
Docker gets them by name from the environment of the `docker run` it starts (`--env HF_TOKEN`), never
by reading secrets.env a second time with its own rules (docker's --env-file keeps quotes, CRs and
comments). Standard library only: the shell calls it before any virtual environment exists.

    python3 -m utils.secrets has KEY          exit 0 when KEY has a value, 1 when not
    python3 -m utils.secrets names            the names a container gets, one a line
    python3 -m utils.secrets exec -- CMD...   run CMD with those names set to their values

Each exits 2, naming the line and not its text, when secrets.env has a line it cannot read.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from utils.envfile import parse_env_file
from utils.url_secrets import values_in

SECRETS_FILE = Path(__file__).resolve().parent.parent / "secrets.env"
CONFIG_FILE = SECRETS_FILE.with_name("config.env")  # its URLs may carry a credential the configuration check refuses
SECRET_KEYS = ("HF_TOKEN",)  # secrets also taken from the environment (there, any other name is not a secret)


class SecretsError(ValueError):
    """secrets.env has a line TPrimat cannot read, so it cannot know every secret it holds."""


def _read(path: Path | None, strict: bool = True) -> dict[str, str]:
    path = SECRETS_FILE if path is None else path
    values, problems = parse_env_file(path)
    if problems and strict:
        # A line it cannot split is quoted after ", got": not here, where it may hold a secret.
        said = [problem.split(", got ", 1)[0] + (" (the line is not shown: it may hold a secret)" if ", got " in problem
                                                else "") for problem in problems]
        raise SecretsError(f"{'; '.join(said)}; fix secrets.env as secrets.env.example shows")
    return values


def load_secrets(path: Path | None = None, env: dict | None = None, strict: bool = False) -> dict[str, str]:
    """The secrets TPrimat passes on, by name: each key of secrets.env and each of SECRET_KEYS, the
    environment's value winning over the file's; empty ones left out. strict: raise SecretsError on a
    line it cannot read (what passes secrets on must know them all; a token lookup may skip it)."""
    env = os.environ if env is None else env
    file_values = _read(path, strict)
    names = dict.fromkeys([*file_values, *SECRET_KEYS])
    chosen = {key: env.get(key) or file_values.get(key, "") for key in names}
    return {key: value for key, value in chosen.items() if value}


def known_values(path: Path | None = None, env: dict | None = None,
                 config: Path | None = None) -> list[tuple[str, str]]:
    """Every secret value from every source as (where it comes from, value), to search for: the file's
    and the environment's both, even where one hides the other, and each credential of a URL in any
    variable of the environment or config.env (HISTORY_DB=postgresql://u@h/db?password=..., which a
    run may have copied before the check refused it). Raises SecretsError."""
    env = os.environ if env is None else env
    file_values = _read(path)
    found = [(f"{key} (secrets.env)", value) for key, value in file_values.items() if value]
    found += [(f"{key} (environment)", env[key]) for key in dict.fromkeys([*file_values, *SECRET_KEYS])
              if env.get(key) and env[key] != file_values.get(key)]
    config_values = parse_env_file(CONFIG_FILE if config is None else config)[0]
    for source, values in (("environment", env), ("config.env", config_values)):
        found += [(f"a password in the URL of {key} ({source})", value) for key, text in values.items()
                  for value in values_in(text)]
    return found


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    usage = "usage: python3 -m utils.secrets has KEY | names | exec -- CMD..."
    if args[:1] in (["-h"], ["--help"]):
        print(f"{usage}\n\n{__doc__.strip()}")
        return 0
    try:
        secrets = load_secrets(strict=True)
    except SecretsError as err:
        print(f"[tprimat] error: {err}", file=sys.stderr)
        return 2
    if len(args) == 2 and args[0] == "has":
        return 0 if args[1] in secrets else 1
    if args == ["names"]:
        print("\n".join(secrets))
        return 0
    if len(args) >= 3 and args[:2] == ["exec", "--"]:
        program = shutil.which(args[2]) or args[2]  # looked up on the caller's PATH, before secrets.env's names are set
        try:
            os.execve(program, args[2:], {**os.environ, **secrets})
        except OSError as err:
            print(f"[tprimat] error: cannot run {args[2]}: {err.strerror}", file=sys.stderr)
            return 127
    print(f"{usage}\nutils.secrets: error: unrecognized arguments: {' '.join(args) or '(none)'}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
