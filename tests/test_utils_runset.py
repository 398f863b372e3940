"""utils.runset: a new run set is claimed by mkdir itself; a taken name gets -2, -3; one line when it cannot be made."""

from __future__ import annotations

from datetime import datetime

import pytest

from utils.cli import UsageError
from utils.runset import make_run_set

NOW = datetime(2026, 1, 1, 12, 0, 0)


def test_a_new_run_set_is_named_by_time_and_platform_and_never_shared(tmp_path):
    first = make_run_set(tmp_path / "output", "amd", now=NOW)
    assert first == tmp_path / "output" / "20260101-120000-amd" and first.is_dir()
    (first / "owner").write_text("other\n")
    assert make_run_set(tmp_path / "output", "amd", now=NOW).name == "20260101-120000-amd-2"
    assert make_run_set(tmp_path / "output", "amd", now=NOW).name == "20260101-120000-amd-3"
    assert sorted(p.name for p in first.iterdir()) == ["owner"]


def test_a_given_run_set_is_used_as_it_is(tmp_path):
    given = tmp_path / "slurm" / "set"
    assert make_run_set(tmp_path / "output", "nvd", given=given) == given and given.is_dir()
    assert not (tmp_path / "output").exists()


def test_a_run_set_that_cannot_be_created_is_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    with pytest.raises(UsageError, match=rf"^RUN_SET_DIR={blocker}/set: cannot create the run set: Not a directory$"):
        make_run_set(tmp_path, "amd", given=blocker / "set")
    with pytest.raises(UsageError, match=rf"^OUTPUT_DIR={blocker}: cannot create the run set there: File exists$"):
        make_run_set(blocker, "amd", now=NOW)
