"""Two commands at once on the same folders, as two `./shell/run_train.sh` on the CPU sample are: the data preparation
both start (shell/data.sh, which the matrix runs when the sample is missing) is done once, the second waiting and then
finding every stage up to date; the two matrices write separate run sets."""

from __future__ import annotations

import json
import subprocess
import time

from tests.test_faults_paths import REPO, TIMEOUT_S, user_env

STAGES = ("fetch-sample", "clean-sample", "tokenizer-llama", "encode-sample-llama", "verify-sample-llama")


def started(command: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_two_data_preparations_on_one_data_dir_run_one_after_the_other_and_the_second_finds_the_data_current(
        tmp_path):
    env = user_env(tmp_path)
    first = started(["bash", "shell/data.sh"], env)
    lock = tmp_path / "data" / ".run_data.lock"
    deadline = time.monotonic() + 60
    while not (lock.exists() and lock.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)  # the first holds DATA_DIR's lock (its pid written into it)
    second = started(["bash", "shell/data.sh"], env)
    out_first, _ = first.communicate(timeout=TIMEOUT_S)
    out_second, _ = second.communicate(timeout=TIMEOUT_S)
    assert first.returncode == 0 and second.returncode == 0, out_first[-2000:] + out_second[-2000:]
    lines = [line for line in out_second.splitlines() if line.startswith("[tprimat] ")]
    assert lines[0] == (f"[tprimat] another run_data.sh is preparing {tmp_path / 'data'} (pid {first.pid}); waiting "
                        "for it to finish (Ctrl-C to stop)")
    assert [line for line in lines if ": up to date, skipped" in line] == [
        f"[tprimat] {stage}: up to date, skipped (FORCE=1 redoes it)" for stage in STAGES]
    assert all(f"[tprimat] {stage}: running (never run)" in out_first for stage in STAGES)
    manifest = json.loads((tmp_path / "data" / "sample_llama_text_document.manifest.json").read_text())
    assert manifest["verified"] is True


def test_two_matrices_started_together_on_one_output_dir_write_separate_run_sets(tmp_path):
    env = user_env(tmp_path, DRY_RUN="1", MOCK_DATA="1", FRAMEWORK="mega")
    matrices = [started(["./shell/run_train.sh"], env) for _ in range(2)]
    outputs = [matrix.communicate(timeout=TIMEOUT_S)[0] for matrix in matrices]
    assert [matrix.returncode for matrix in matrices] == [0, 0], outputs
    run_sets = sorted((tmp_path / "output").iterdir())
    assert len(run_sets) == 2
    said = sorted(line.removeprefix("[tprimat] run set: ") for out in outputs for line in out.splitlines()
                  if line.startswith("[tprimat] run set: "))
    assert said == [str(run_set) for run_set in run_sets]
    assert all(sorted(p.name for p in run_set.glob("*/launch.json")) == ["launch.json"] for run_set in run_sets)
