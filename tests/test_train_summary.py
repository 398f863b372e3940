"""train.launch.summary: the run set's table shows each figure as utils.spec.metrics.figure_text writes it, so that a CPU's
TFLOP/s/GPU reads 0.0472, not 0.0."""

from __future__ import annotations

import json

from train.launch import summary


def test_a_cpu_figure_keeps_its_significant_digits_in_the_summary(tmp_path, capsys):
    run = tmp_path / "mega-llama"
    run.mkdir()
    (run / "config.json").write_text("{}")
    (run / "launch.json").write_text(json.dumps({"status": "ok", "wall_s": 14.2}))
    (run / "result.json").write_text(json.dumps({"performance": {"tokens_per_s_per_gpu": 386.1,
                                                                 "tflop_per_s_per_gpu": 0.0472}}))
    assert summary.main([str(tmp_path)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("mega-llama"))
    assert row.split() == ["mega-llama", "ok", "386", "0.0472", "0m14s"]
