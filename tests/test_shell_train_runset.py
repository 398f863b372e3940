"""The run set of ./shell/run_train.sh: a directory of its own under OUTPUT_DIR, claimed atomically, and
one line when it cannot be created; a dry run whose commands could not be generated is a failure."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from tests.fixtures.train_matrix.shell import machine, run_dirs

DRY = {"DRY_RUN": "1", "MOCK_DATA": "1", "MODELS": "llama", "FRAMEWORK": "mega"}


def test_a_run_set_that_cannot_be_created_stops_in_one_line_with_exit_2(tmp_path):
    """utils.config refuses an OUTPUT_DIR that is a file; a run set given by a launcher is the shell's to check."""
    fake = machine(tmp_path, amd=8)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    result = fake.run("shell/run_train.sh", RUN_SET_DIR=str(blocker / "set"), **DRY)
    assert result.returncode == 2, result.output
    errors = [line for line in result.stderr.splitlines() if "error" in line or "mkdir" in line]
    assert errors == [f"[tprimat] error: RUN_SET_DIR={blocker}/set: cannot create the run set: Not a directory"]
    assert blocker.read_text() == "not a directory\n"


def test_a_run_set_another_command_claimed_first_is_never_shared(tmp_path):
    """Two run_train.sh started in the same second: the name the other one took first is skipped. The other
    command has claimed the name of every second this one could start in (utils.runset's own test fixes the
    clock; here the whole command runs)."""
    fake = machine(tmp_path, amd=8)
    output = tmp_path / "output"
    now = datetime.now()
    taken = [output / f"{(now + timedelta(seconds=s)).strftime('%Y%m%d-%H%M%S')}-amd" for s in range(-2, 600)]
    for other in taken:
        other.mkdir(parents=True)
        (other / "owner").write_text("other\n")
    result = fake.run("shell/run_train.sh", **DRY)
    assert result.returncode == 0, result.output
    assert all(sorted(p.name for p in other.iterdir()) == ["owner"] for other in taken)
    (run_set,) = {d.parent for d in run_dirs(output)}
    assert run_set.name.endswith("-amd-2") and run_set.with_name(run_set.name.removesuffix("-2")) in taken


def test_a_dry_run_whose_command_could_not_be_generated_fails(tmp_path):
    fake = machine(tmp_path, amd=8)
    run_set = tmp_path / "output" / "set"
    (run_set / "mega-llama").mkdir(parents=True)
    (run_set / "mega-llama" / "config.json").write_text(json.dumps({"run_id": "mega-llama"}))
    result = fake.run("shell/run_train.sh", RUN_SET_DIR=str(run_set), **DRY)
    assert result.returncode == 1, result.output
    assert "already holds a run" in result.stderr
    assert "1 run(s), 0 ok, 1 not ok" in result.stdout
