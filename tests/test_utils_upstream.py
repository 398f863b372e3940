"""The upstream-fact table (utils/upstream/table.py): each entry is complete and names a test that exists, and the re-check
reads a fact's lines back from a checkout at its ref and fails on any change to them."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from utils import upstream
from utils.errors import WorkError

ROOT = Path(__file__).resolve().parent.parent


def functions_in(path: Path) -> set[str]:
    return {node.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.FunctionDef)}


def test_every_fact_is_located_hashed_explained_and_held_by_a_test_that_exists():
    names = [fact.name for fact in upstream.FACTS]
    assert len(names) == len(set(names))
    for fact in upstream.FACTS:
        assert fact.source in upstream.SOURCES, fact.name
        first, last = fact.lines
        assert 1 <= first <= last, fact.name
        assert re.fullmatch(r"[0-9a-f]{64}", fact.sha256), fact.name
        assert fact.claim.strip() and fact.path and not fact.path.startswith("/"), fact.name
        file, _, function = fact.test.partition("::")
        assert (ROOT / file).is_file() and function in functions_in(ROOT / file), f"{fact.name}: {fact.test}"


def test_every_source_is_pinned_to_a_tag_or_commit_and_a_package_to_its_version():
    for key, source in upstream.SOURCES.items():
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", source.repo), key
        assert re.fullmatch(r"[0-9a-f]{40}|(core_)?v?\d[\w.]*", source.ref), key  # Megatron-LM: core_vX.Y.Z
        assert source.package is None or re.fullmatch(r"[\w.-]+==[\w.]+", source.package), key


@pytest.fixture
def checkout(tmp_path) -> tuple[str, str]:
    """A git repository with one commit of a three-line file: (its folder, the commit)."""
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    (tmp_path / "a.py").write_text("one\ntwo\nthree\n")
    subprocess.run(git + ["add", "a.py"], check=True)
    subprocess.run(git + ["commit", "-qm", "c"], check=True)
    commit = subprocess.run(git[:3] + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout
    (tmp_path / "a.py").write_text("one\nTWO\nthree\n")  # the work tree moved on: the ref is what is read
    return str(tmp_path), commit.strip()


def test_a_fact_reads_as_recorded_at_its_ref_and_a_changed_line_is_named(checkout, monkeypatch):
    git_dir, commit = checkout
    digest = upstream.line_hash("one\ntwo\nthree\n", 2, 3)
    monkeypatch.setitem(upstream.SOURCES, "toy", upstream.Source("o/toy", commit))
    fact = upstream.Fact("toy-two", "toy", "a.py", (2, 3), digest, "a claim", "tests/x.py::t")
    read = lambda source, path: upstream.read_checkout(git_dir, source.ref, path)  # noqa: E731
    assert upstream.problems((fact,), read) == []
    moved = upstream.Fact("toy-one", "toy", "a.py", (1, 2), digest, "a claim", "tests/x.py::t")
    found = upstream.line_hash("one\ntwo", 1, 2)
    assert upstream.problems((moved,), read) == [
        f"toy-one: a.py:1-2 at {commit} hashes {found[:12]}, the table has {digest[:12]}: read it again"]
    outside = upstream.Fact("toy-far", "toy", "a.py", (3, 9), digest, "a claim", "tests/x.py::t")
    assert upstream.problems((outside,), read) == ["toy-far: lines 3-9 are outside the file (3 lines)"]


def test_a_file_missing_at_the_ref_is_a_failure_not_a_pass(checkout):
    git_dir, commit = checkout
    with pytest.raises(WorkError, match="b.py at"):
        upstream.read_checkout(git_dir, commit, "b.py")


def test_the_hash_command_prints_the_tables_hash_of_a_line_range(checkout):
    git_dir, commit = checkout
    out = subprocess.run([sys.executable, "-m", "utils.upstream", "hash", "--checkout", git_dir, "--ref", commit,
                          "a.py", "1", "2"], capture_output=True, text=True, cwd=ROOT)
    assert (out.returncode, out.stdout.strip()) == (0, upstream.line_hash("one\ntwo\n", 1, 2))


@pytest.mark.parametrize("args, problem", [
    (["check"], "give --checkout"),
    (["check", "--checkout", "nowhere"], "give OWNER/NAME=GIT_DIR"),
    (["check", "--checkout", "someone/else=/tmp"], "no facts of that repository"),
])
def test_a_check_without_a_known_checkout_is_one_line_and_exit_2(args, problem):
    out = subprocess.run([sys.executable, "-m", "utils.upstream", *args], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and problem in out.stderr and "Traceback" not in out.stderr
