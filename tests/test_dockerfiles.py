"""The images: vendor bases, only what the base lacks, the vendor environment of utils/machine/platform_env."""

from __future__ import annotations

import re

import pytest

from tests.shell_harness import REPO, FakeMachine
from utils.machine.platform_env import PLATFORM_ENV
from utils.spec import stacks


def instructions(platform: str) -> list[str]:
    text = (REPO / f"{platform}.Dockerfile").read_text().replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def env_of(platform: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in instructions(platform):
        if line.startswith("ENV "):
            found.update(re.findall(r"(\w+)=(\S+)", line))
    return found


@pytest.mark.parametrize("platform", ["amd", "nvd"])
def test_image_builds_on_the_base_it_is_given_and_names_no_stack_s_image(platform):
    """BASE_IMAGE has no default: utils/spec/stacks.py is its one source, so a new newest row edits no Dockerfile."""
    assert instructions(platform)[:2] == ["ARG BASE_IMAGE", "FROM ${BASE_IMAGE}"]
    text = (REPO / f"{platform}.Dockerfile").read_text()
    assert not any(row.image in text for row in stacks.of(platform))


@pytest.mark.parametrize("platform", ["amd", "nvd"])
def test_the_build_passes_the_default_stack_s_image_as_base_image(tmp_path, platform):
    """shell/lib/docker.sh gives the Dockerfile its base: with STACK unset, the platform's newest row's image."""
    result = FakeMachine(tmp_path, engine=True).run("shell/build.sh", PLATFORM=platform)
    assert result.returncode == 0, result.output
    (build,) = result.calls_of("docker", "build")
    assert build[build.index("--build-arg") + 1] == f"BASE_IMAGE={stacks.default(platform).image}"
    assert build[build.index("--file") + 1].endswith(f"/{platform}.Dockerfile")


@pytest.mark.parametrize("platform", ["amd", "nvd"])
def test_requirements_header_names_no_single_base_image(platform):
    header = (REPO / "requirements" / f"{platform}.txt").read_text().splitlines()[0]
    assert "BASE_IMAGE" in header and not any(row.image in header for row in stacks.of(platform))


@pytest.mark.parametrize("platform", ["amd", "nvd"])
def test_image_sets_exactly_the_platform_environment(platform):
    """The platform-wide values; a stack's own (utils/spec/stacks.py) differ between the bases one Dockerfile builds
    on, so the launcher sets them per run and the image bakes none in."""
    env = env_of(platform)
    for key, value in PLATFORM_ENV[platform].items():
        assert env.get(key) == value, key
    assert not {key for row in stacks.of(platform) for key in row.env} & set(env)


@pytest.mark.parametrize("platform", ["amd", "nvd"])
def test_image_installs_its_requirements_keeping_the_base_stack(platform):
    steps = " ".join(instructions(platform))
    assert f"COPY requirements/{platform}.txt" in steps
    assert "-c /tmp/tprimat-keep.txt" in steps and "torch" in steps
    pins = [line for line in (REPO / "requirements" / f"{platform}.txt").read_text().splitlines()
            if line and not line.startswith("#")]
    assert pins and all("==" in pin for pin in pins)
    assert not any(pin.lower().startswith(("torch==", "megatron", "transformer-engine")) for pin in pins)
