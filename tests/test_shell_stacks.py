"""STACK on faked 8-GPU nodes: the image each stack builds FROM, the commands a dry run prints, and the base
image's digest passed into the container for the result."""

from __future__ import annotations

import pytest

from tests.fixtures.train_matrix.shell import machine
from tests.shell_harness import FakeMachine
from utils.spec import stacks

DIGEST = "rocm/primus@sha256:" + "b" * 64
NODES = [({"amd": 8}, "amd"), ({"nvidia": 8}, "nvd")]


def previous(platform: str) -> stacks.Stack:
    """The row just older than the platform's default (a newer row not checked here may stand above it)."""
    rows = stacks.of(platform)
    return rows[rows.index(stacks.default(platform)) + 1]


@pytest.mark.parametrize("gpus, platform", NODES)
@pytest.mark.parametrize("older", [False, True], ids=["default", "STACK=older"])
def test_a_dry_run_prints_the_stack_s_image_and_commands(tmp_path, gpus, platform, older):
    """The newest row by default; the older ones with STACK= (both vendors' in one list)."""
    row = previous(platform) if older else stacks.default(platform)
    env = {"STACK": f"{previous('amd').name},{previous('nvd').name}"} if older else {}
    result = machine(tmp_path, engine=True, **gpus).run("shell/run_train.sh", DRY_RUN="1", FRAMEWORK="mega",
                                                        MODELS="llama", **env)
    assert result.returncode == 0, result.output
    image = f"tprimat:{platform}-{row.name}"
    assert f"a real run would first pull {row.image} (stack {row.name}) and build {image}" in result.stderr
    assert f"platform {platform}: stack {row.name} ({row.image})" in result.stdout
    host_lines = [line for line in result.stderr.splitlines() if "from the host: docker run" in line]
    assert len(host_lines) == 1 and f" {image} bash train/launch.sh {platform} mega llama " in host_lines[0]
    assert "TPRIMAT_IMAGE_DIGEST=unknown" in host_lines[0]  # nothing built yet: no digest to pass
    assert {call[1] for call in result.calls_of("docker")} <= {"info", "image"}  # a dry run pulls nothing


def test_a_real_run_pulls_the_base_builds_from_it_and_passes_its_digest_in(tmp_path):
    node = FakeMachine(tmp_path, amd=8, engine=True)
    row = previous("amd")
    result = node.run("shell/run_train.sh", STACK=row.name, FAKE_DOCKER_BASE_DIGEST=DIGEST)
    assert result.returncode == 0, result.output
    assert result.calls_of("docker", "pull") == [["docker", "pull", row.image]]
    build = result.calls_of("docker", "build")[0]
    assert build[build.index("--tag") + 1] == f"tprimat:amd-{row.name}"
    assert f"BASE_IMAGE={row.image}" in build and f"tprimat.base_digest={DIGEST}" in build
    assert f"tprimat.stack={row.name}" in build
    (run,) = result.calls_of("docker", "run")
    assert f"STACK={row.name}" in run  # the container resolves the same row
    label = next(arg for arg in build if arg.startswith("tprimat.hash="))
    again = node.run("shell/run_train.sh", STACK=row.name, FAKE_DOCKER_BASE_DIGEST=DIGEST,
                     FAKE_DOCKER_IMAGE_HASH=label.split("=", 1)[1])
    assert again.calls_of("docker", "build") == [] and again.calls_of("docker", "pull") == []
    assert f"TPRIMAT_IMAGE_DIGEST={DIGEST}" in again.calls_of("docker", "run")[0]  # read from the built image


def test_another_stack_is_another_image_and_a_base_without_digest_is_said(tmp_path):
    node = FakeMachine(tmp_path, nvidia=8, engine=True)
    newest = node.run("shell/run_train.sh")
    older = node.run("shell/run_train.sh", STACK=previous("nvd").name)
    hashes = [next(a for a in r.calls_of("docker", "build")[0] if a.startswith("tprimat.hash=")) for r in (newest, older)]
    assert hashes[0] != hashes[1]  # the base image is one of the image's inputs
    assert "has no registry digest" in newest.stderr and "image_digest null" in newest.stderr


def test_a_failed_pull_is_one_line_naming_the_image_and_the_fix(tmp_path):
    result = FakeMachine(tmp_path, nvidia=8, engine=True).run("shell/run_train.sh", FAKE_DOCKER_PULL_FAIL="1")
    assert result.returncode == 1 and result.calls_of("docker", "build") == []
    error = result.stderr.splitlines()[-1]
    assert stacks.default("nvd").image in error and "docker login nvcr.io" in error and "STACK" in error


def test_build_sh_builds_the_stack_of_the_platform_it_is_asked_for(tmp_path):
    node = FakeMachine(tmp_path, engine=True)  # no GPU here: building for another machine
    result = node.run("shell/build.sh", PLATFORM="nvd", STACK=previous("nvd").name)
    assert result.returncode == 0, result.output
    assert f"BASE_IMAGE={previous('nvd').image}" in result.calls_of("docker", "build")[0]
    bad = node.run("shell/build.sh", PLATFORM="nvd", STACK="nemo-24.12")
    assert bad.returncode == 2 and "STACK=nemo-24.12: unknown nemo-24.12" in bad.stderr
    assert "Traceback" not in bad.output


def test_a_wrapper_of_a_framework_the_default_stack_lacks_names_the_stack_that_has_it(tmp_path):
    result = machine(tmp_path, nvidia=8).run("train/train_nvd_nemo_qwen.sh", DRY_RUN="1")
    assert result.returncode == 2, result.output
    assert result.stderr.splitlines()[-1] == (f"[tprimat] error: nemo (NeMo) is not on stack "
                                              f"{stacks.default('nvd').name}; it runs on nemo-25.04: STACK=nemo-25.04")
