"""A strategy sweep on the CPU, end to end (issue 8): every strategy of the list runs into its own
directory and the comparison marks the faster strategy.

The tiny Llama alone: a sweep is the matrix's run list with more layouts in it, and the matrix's going on past a
failing run is test_shell_train_cpu.py's (its Qwen fails for real).
"""

from __future__ import annotations

import re

from tests.fixtures.train_matrix.shell import machine, read
from tests.test_shell_train_cpu import DATA_STAGE, FEW_STEPS

SWEEP = "minimal_communication,memory_optimized"


def test_a_two_strategy_sweep_runs_each_layout_and_marks_the_faster_strategy(tmp_path):
    fake = machine(tmp_path)
    (fake.root / "shell" / "data.sh").write_text(DATA_STAGE)
    result = fake.run("shell/run_train.sh", STRATEGY=SWEEP, MODELS="llama", **FEW_STEPS)
    assert result.returncode == 0, result.output[-3000:]

    results = {}
    for path in (tmp_path / "output").glob("*-cpu/**/result.json"):
        data = read(path)
        results[(data["parallelism"]["strategy"], data["model"]["variant"])] = data
    assert set(results) == {(s, "llama3.1-8b-tiny") for s in SWEEP.split(",")}
    layouts = {s: (results[(s, "llama3.1-8b-tiny")]["parallelism"]["tp"],
                   results[(s, "llama3.1-8b-tiny")]["parallelism"]["pp"],
                   results[(s, "llama3.1-8b-tiny")]["parallelism"]["dp"]) for s in SWEEP.split(",")}
    assert layouts == {"minimal_communication": (1, 1, 2), "memory_optimized": (1, 2, 1)}
    assert [data["run"]["status"] for data in results.values()] == ["ok", "ok"]

    speeds = {s: results[(s, "llama3.1-8b-tiny")]["performance"]["tokens_per_s_per_gpu"] for s in SWEEP.split(",")}
    faster = max(speeds, key=speeds.get)
    [run_set] = (tmp_path / "output").glob("*-cpu")
    report = (run_set / "report.md").read_text()
    assert re.search(rf"\| {faster} \*\*best\*\* \|", report), report
    assert report.count("**best**") >= 1
    assert (run_set / "compare-strategies.png").stat().st_size > 10_000
