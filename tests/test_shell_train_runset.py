"""The run set of ./shell/run_train.sh: a directory of its own under OUTPUT_DIR, claimed atomically, and
one line when it cannot be created; a dry run whose commands could not be generated is a failure."""

from __future__ import annotations

import json

from tests.fixtures.train_matrix.shell import machine, run_dirs

DRY = {"DRY_RUN": "1", "MOCK_DATA": "1", "MODELS": "llama"}


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
    """Two run_train.sh started in the same second: the name the other one took first is skipped."""
    fake = machine(tmp_path, amd=8)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "date").write_text("#!/bin/sh\necho 20260101-120000\n")
    # the other command creates the run set in the moment between this one choosing the name and creating it
    (bin_dir / "mkdir").write_text(
        "#!/usr/bin/env bash\n"
        'for last; do :; done\n'
        f'if [[ "${{last}}" == */20260101-120000-amd && ! -e {tmp_path}/stolen ]]; then\n'
        f'  touch {tmp_path}/stolen; /bin/mkdir -p "${{last}}"; echo other >"${{last}}/owner"\n'
        "fi\n"
        'exec /bin/mkdir "$@"\n')
    for tool in ("date", "mkdir"):
        (bin_dir / tool).chmod(0o755)
    result = fake.run("shell/run_train.sh", PATH=f"{bin_dir}:{fake.env['PATH']}", **DRY)
    assert result.returncode == 0, result.output
    taken = tmp_path / "output" / "20260101-120000-amd"
    assert sorted(p.name for p in taken.iterdir()) == ["owner"]
    (run_set,) = {d.parent for d in run_dirs(tmp_path / "output")}
    assert run_set.name == "20260101-120000-amd-2"


def test_a_dry_run_whose_command_could_not_be_generated_fails(tmp_path):
    fake = machine(tmp_path, amd=8)
    run_set = tmp_path / "output" / "set"
    (run_set / "mega-llama").mkdir(parents=True)
    (run_set / "mega-llama" / "config.json").write_text(json.dumps({"run_id": "mega-llama"}))
    result = fake.run("shell/run_train.sh", RUN_SET_DIR=str(run_set), FRAMEWORK="mega", **DRY)
    assert result.returncode == 1, result.output
    assert "already holds a run" in result.stderr
    assert "1 run(s), 0 ok, 1 not ok" in result.stdout
