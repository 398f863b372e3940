"""Secrets reach a container exactly as TPrimat reads secrets.env (or the environment), by name, never
printed, never written to another file, and never read a second time by Docker's own --env-file rules."""

from __future__ import annotations

import re

import pytest

from tests.shell_harness import FAKEBIN, SECRET_VALUE, FakeMachine


def docker_node(tmp_path, secrets: str | None) -> FakeMachine:
    """An NVIDIA node whose docker engine answers and whose fake docker also records the environment each
    `docker run` was started with; `secrets` is the text of secrets.env (None: there is none)."""
    node = FakeMachine(tmp_path, nvidia=8, engine=True, secrets=False)
    if secrets is not None:
        (node.root / "secrets.env").write_bytes(secrets.encode())
    recorder = tmp_path / "recorder"
    recorder.mkdir()
    (recorder / "docker").write_text(
        '#!/usr/bin/env bash\n'
        '[[ "${1:-}" != run ]] || env >"${DOCKER_RUN_ENV}"\n'
        f'exec {FAKEBIN}/docker "$@"\n')
    (recorder / "docker").chmod(0o755)
    node.env["PATH"] = f"{recorder}:{node.env['PATH']}"
    node.env["DOCKER_RUN_ENV"] = str(tmp_path / "docker-run.env")
    return node


def docker_run(result) -> list[str]:
    runs = result.calls_of("docker", "run")
    assert len(runs) == 1, result.output
    return runs[0]


def environment_of_docker_run(tmp_path) -> dict[str, str]:
    lines = (tmp_path / "docker-run.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def passed_by_name(run: list[str]) -> list[str]:
    return [run[i + 1] for i, word in enumerate(run) if word == "--env" and "=" not in run[i + 1]]


@pytest.mark.parametrize("secrets", [
    f'HF_TOKEN="{SECRET_VALUE}"\n',
    f"HF_TOKEN='{SECRET_VALUE}'\n",
    f"HF_TOKEN={SECRET_VALUE}\r\n",
    f"HF_TOKEN={SECRET_VALUE}  # my read token\n",
    f"export HF_TOKEN={SECRET_VALUE}\n",
], ids=["double-quoted", "single-quoted", "CRLF", "inline-comment", "export"])
def test_the_container_gets_the_value_tprimat_read_not_dockers_reading_of_the_file(tmp_path, secrets):
    node = docker_node(tmp_path, secrets)
    result = node.run("shell/run_data.sh")
    assert result.returncode == 0, result.output
    run = docker_run(result)
    assert "--env-file" not in run
    assert passed_by_name(run) == ["HF_TOKEN"]
    assert environment_of_docker_run(tmp_path)["HF_TOKEN"] == SECRET_VALUE
    assert SECRET_VALUE not in result.output + node.log.read_text()


def test_a_token_only_in_the_environment_reaches_the_container(tmp_path):
    node = docker_node(tmp_path, secrets=None)
    result = node.run("shell/run_data.sh", HF_TOKEN=SECRET_VALUE)
    assert result.returncode == 0, result.output
    assert passed_by_name(docker_run(result)) == ["HF_TOKEN"]
    assert environment_of_docker_run(tmp_path)["HF_TOKEN"] == SECRET_VALUE
    assert SECRET_VALUE not in result.output + node.log.read_text()


def test_the_environments_token_wins_over_the_files_as_on_the_host(tmp_path):
    node = docker_node(tmp_path, "HF_TOKEN=hf_TESTSECREToldValue000000\n")
    result = node.run("shell/run_wrap.sh", HF_TOKEN=SECRET_VALUE)
    assert result.returncode == 0, result.output
    assert passed_by_name(docker_run(result)) == ["HF_TOKEN"] and "--env-file" not in docker_run(result)
    assert environment_of_docker_run(tmp_path)["HF_TOKEN"] == SECRET_VALUE


def test_every_key_of_secrets_env_reaches_the_container(tmp_path):
    node = docker_node(tmp_path, f"HF_TOKEN={SECRET_VALUE}\nWANDB_API_KEY='wandbTESTSECRET123456'\n")
    result = node.run("shell/run_wrap.sh")
    assert result.returncode == 0, result.output
    assert passed_by_name(docker_run(result)) == ["HF_TOKEN", "WANDB_API_KEY"]
    assert environment_of_docker_run(tmp_path)["WANDB_API_KEY"] == "wandbTESTSECRET123456"


@pytest.mark.parametrize("detach", ["0", "1"])
def test_no_file_but_secrets_env_ever_holds_a_secret(tmp_path, detach):
    node = docker_node(tmp_path, f'HF_TOKEN="{SECRET_VALUE}"\n')
    result = node.run("shell/run_wrap.sh", DETACH=detach)
    assert result.returncode == 0, result.output
    (tmp_path / "docker-run.env").unlink()  # the recorder's own copy, for the assertions above
    holding = [path for path in tmp_path.rglob("*")
               if path.is_file() and SECRET_VALUE.encode() in path.read_bytes()]
    assert holding == [node.root / "secrets.env"]


def test_a_dry_run_shows_the_secrets_by_name_and_starts_nothing(tmp_path):
    node = docker_node(tmp_path, f'HF_TOKEN="{SECRET_VALUE}"\n')
    result = node.run("shell/run_train.sh", DRY_RUN="1")
    (line,) = [line for line in result.stderr.splitlines() if "a real run would start: docker run" in line]
    assert re.search(r" --env HF_TOKEN ", line) and "--env-file" not in line
    assert SECRET_VALUE not in result.output
    assert result.calls_of("docker", "run") == []


@pytest.mark.parametrize("secrets", ['HF_TOKEN=""\n', "HF_TOKEN=   # paste it here\n", "# HF_TOKEN=hf_x\n"],
                         ids=["empty-quotes", "only-a-comment", "commented-out"])
def test_a_token_check_reads_secrets_env_as_tprimat_does(tmp_path, secrets):
    node = docker_node(tmp_path, secrets)
    result = node.run("shell/run_data.sh")
    assert result.returncode == 2
    assert "needs HF_TOKEN" in result.stderr
    assert result.calls_of("docker", "run") == []


@pytest.mark.parametrize("script, env", [("shell/run_data.sh", {}), ("shell/run_wrap.sh", {}),
                                         ("shell/run_train.sh", {"DRY_RUN": "1"})], ids=["data", "wrap", "dry-run"])
def test_a_secrets_env_line_tprimat_cannot_read_stops_before_docker_naming_the_line_not_its_text(tmp_path, script,
                                                                                                   env):
    node = docker_node(tmp_path, f"# my token\nHF_TOKEN {SECRET_VALUE}\n")
    result = node.run(script, **env)
    assert result.returncode == 2
    assert "secrets.env:2: expected KEY=VALUE (the line is not shown" in result.stderr
    assert SECRET_VALUE not in result.output and "Traceback" not in result.output
    assert result.calls_of("docker", "run") == []
