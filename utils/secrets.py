"""The secrets TPrimat knows (HF_TOKEN), from the environment or secrets.env; never printed, only passed on."""

from __future__ import annotations

import os
from pathlib import Path

from utils.envfile import parse_env_file

SECRETS_FILE = Path(__file__).resolve().parent.parent / "secrets.env"
SECRET_KEYS = ("HF_TOKEN",)


def load_secrets(path: Path = SECRETS_FILE, env: dict | None = None) -> dict[str, str]:
    """HF_TOKEN and friends from the environment or secrets.env (the environment wins)."""
    env = os.environ if env is None else env
    file_values, _ = parse_env_file(path)
    return {k: env.get(k) or file_values.get(k, "") for k in SECRET_KEYS if env.get(k) or file_values.get(k)}
