"""utils.secrets: every secret TPrimat knows, read once by TPrimat's own parser, and never shown."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.shell_harness import REPO
from utils.secrets import SecretsError, known_values, load_secrets

TOKEN = "hf_TESTSECRET123abcdefghij"


@pytest.mark.parametrize("line", [f'HF_TOKEN="{TOKEN}"', f"HF_TOKEN='{TOKEN}'", f"HF_TOKEN={TOKEN}\r",
                                  f"HF_TOKEN={TOKEN}  # read token", f"export HF_TOKEN={TOKEN}"])
def test_a_value_is_read_without_its_quotes_cr_or_comment(tmp_path, line):
    path = tmp_path / "secrets.env"
    path.write_text(f"{line}\n")
    assert load_secrets(path, env={}) == {"HF_TOKEN": TOKEN}


def test_the_environments_token_wins_but_both_values_are_known(tmp_path):
    path = tmp_path / "secrets.env"
    path.write_text(f"HF_TOKEN={TOKEN}\nWANDB_API_KEY=wandbTESTSECRET1\n")
    env = {"HF_TOKEN": "hf_OTHERtoken456abcdefghij", "PATH": "/usr/bin"}
    assert load_secrets(path, env) == {"HF_TOKEN": "hf_OTHERtoken456abcdefghij", "WANDB_API_KEY": "wandbTESTSECRET1"}
    assert known_values(path, env) == [("HF_TOKEN (secrets.env)", TOKEN),
                                       ("WANDB_API_KEY (secrets.env)", "wandbTESTSECRET1"),
                                       ("HF_TOKEN (environment)", "hf_OTHERtoken456abcdefghij")]


def test_a_line_it_cannot_read_is_named_without_its_text_where_every_secret_must_be_known(tmp_path):
    path = tmp_path / "secrets.env"
    path.write_text(f"HF_TOKEN {TOKEN}\n")
    with pytest.raises(SecretsError, match=r"^secrets\.env:1: ") as raised:
        known_values(path, env={})
    assert TOKEN not in str(raised.value)
    assert load_secrets(path, env={}) == {}  # a token lookup (data.fetch) goes on without it


@pytest.mark.parametrize("secrets, code", [(f"HF_TOKEN={TOKEN}\n", 0), ('HF_TOKEN=""\n', 1), ("HF_TOKEN=x y=\n", 0),
                                           ("HF_TOKEN\n", 2)])
def test_has_answers_with_its_exit_code_and_prints_no_value(tmp_path, secrets, code):
    shutil.copytree(REPO / "utils", tmp_path / "utils")  # secrets.env is found beside utils/
    (tmp_path / "secrets.env").write_text(secrets)
    proc = subprocess.run([sys.executable, "-m", "utils.secrets", "has", "HF_TOKEN"], cwd=tmp_path, env={},
                          capture_output=True, text=True)
    assert proc.returncode == code, proc.stderr
    assert proc.stdout == "" and TOKEN not in proc.stderr and "Traceback" not in proc.stderr


def test_a_key_set_twice_is_refused_since_one_of_its_values_would_go_unsearched(tmp_path):
    path = tmp_path / "secrets.env"
    path.write_text(f"HF_TOKEN={TOKEN}\nHF_TOKEN=hf_TESTSECRETsecond0000000\n")
    with pytest.raises(SecretsError, match="HF_TOKEN is set twice") as raised:
        known_values(path, env={})
    assert TOKEN not in str(raised.value) and "second" not in str(raised.value)
