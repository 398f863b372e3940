"""The documentation keeps its word: every file it names exists, every link lands, every `python3 -m` module it names
is one, every command it names answers --help, and the README stays a short front door to every docs/ page.

The pages are README.md, docs/*.md and bench/README.md. A file is named in backticks (`train/launch.sh`) and is
checked when it has a folder and a file's ending (.py, .sh, .md, .txt, .json, .env, Dockerfile), or is one of the
top-level files (config.env, secrets.env.example, amd.Dockerfile, nvd.Dockerfile). Examples and placeholders are
not files of the repository, by one rule: a path holding `<`, `*`, `{`, `$` or `...`, an absolute or home path, a
path under a knob's folder (spelt in capitals: DATA_DIR/, RUN_DIR/) or under output/ (what runs write), and
another project's file (Megatron-LM's tools/, Primus's examples/ and primus/).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]
README_LINE_LIMIT = 220

FILE_ENDINGS = (".py", ".sh", ".md", ".txt", ".json", ".env", "Dockerfile")
TOP_LEVEL_FILES = {"config.env", "secrets.env.example", "amd.Dockerfile", "nvd.Dockerfile"}
PLACEHOLDER_MARKS = ("<", "*", "{", "$", "...")
WRITTEN_BY_RUNS = "output"
OTHER_PROJECTS = {"tools", "examples", "primus"}  # Megatron-LM's tools/, Primus's examples/ and primus/

HELP_TIMEOUT_S = 60


def text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def code_spans(page_text: str) -> list[str]:
    """The contents of every fenced block and every inline `code` span."""
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", page_text, flags=re.S | re.M)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", page_text, flags=re.S | re.M)
    return fenced + re.findall(r"`([^`\n]+)`", prose)


def is_repository_file(token: str) -> bool:
    if token in TOP_LEVEL_FILES:
        return True
    if "/" not in token or not token.endswith(FILE_ENDINGS):
        return False
    if any(mark in token for mark in PLACEHOLDER_MARKS) or token.startswith(("/", "~")):
        return False
    first = token.removeprefix("./").split("/")[0]
    return not (first.isupper() or first == WRITTEN_BY_RUNS or first in OTHER_PROJECTS)


def named_files(page: Path) -> set[str]:
    tokens = (token.strip(".,:;()[]'\"") for span in code_spans(text(page)) for token in re.split(r"[\s=]+", span))
    return {token.removeprefix("./") for token in tokens if is_repository_file(token)}


def links(page: Path) -> list[str]:
    """Markdown link targets that are not web addresses."""
    return [target for target in re.findall(r"\]\(([^)\s]+)\)", text(page)) if "://" not in target]


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces turned into hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {anchor(heading) for heading in re.findall(r"^#+ (.+)$", text(page), flags=re.M)}


def modules() -> list[str]:
    """Every module named after `python3 -m` or torchrun's `-m` (one spelt in capitals, bench.NAME, is a
    placeholder)."""
    found = {name for page in PAGES for name in re.findall(r"(?:python3|torchrun[^`\n]*?) -m ([\w.]+)", text(page))}
    return sorted(name.rstrip(".") for name in found if name.islower())


def help_commands() -> list[tuple[str, ...]]:
    """The distinct commands to ask for --help: each `python3 -m` module and each script run as ./shell/NAME.sh or
    bash PATH.sh (torchrun forms are left out: they start workers)."""
    every = "\n".join(text(page) for page in PAGES)
    python = {(sys.executable, "-m", name.rstrip("."))
              for name in re.findall(r"python3 -m ([\w.]+)", every) if name.islower()}
    shell = {(f"shell/{name}.sh",) for name in re.findall(r"\./shell/(\w+)\.sh", every)}
    bash = {("bash", path) for path in re.findall(r"\bbash ([\w/]+\.sh)", every) if (ROOT / path).is_file()}
    return sorted(python | shell | bash)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_file_a_page_names_exists(page):
    assert sorted(path for path in named_files(page) if not (ROOT / path).exists()) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_link_lands_on_a_file_and_heading(page):
    broken = []
    for target in links(page):
        path, _, heading = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists() or (heading and heading not in anchors(destination)):
            broken.append(target)
    assert broken == []


@pytest.mark.parametrize("module", modules())
def test_every_module_named_is_one(module):
    assert importlib.util.find_spec(module) is not None


@pytest.fixture(scope="module")
def help_answers() -> dict[tuple[str, ...], subprocess.CompletedProcess]:
    """Every command's --help, run from the repository root without the network, a few at a time."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}

    def ask(command: tuple[str, ...]) -> subprocess.CompletedProcess:
        try:
            return subprocess.run([*command, "--help"], cwd=ROOT, env=env, capture_output=True, text=True,
                                  timeout=HELP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(command, 124, "", f"no answer within {HELP_TIMEOUT_S} s")

    commands = help_commands()
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(commands, pool.map(ask, commands)))


def spelt(command: tuple[str, ...]) -> str:
    return " ".join("python3" if part == sys.executable else part for part in command)


@pytest.mark.parametrize("command", help_commands(), ids=spelt)
def test_every_command_named_answers_help(command, help_answers):
    answer = help_answers[command]
    assert answer.returncode == 0, answer.stderr[-2000:]


def test_the_readme_is_a_short_front_door():
    assert len(text(README).splitlines()) <= README_LINE_LIMIT


def test_the_readme_links_every_docs_page():
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in links(README)}
    assert sorted(page.name for page in (ROOT / "docs").glob("*.md") if page.resolve() not in linked) == []
