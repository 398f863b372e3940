"""bench.default's arguments: no timed default run is only a choice beside --fresh or --ci (both time a fresh clone)."""

from __future__ import annotations

import pytest

from bench import default


@pytest.mark.parametrize("argv", [["--repeats", "0"], ["--repeats", "-1", "--fresh"]])
def test_nothing_to_time_is_refused_in_one_line(argv, capsys):
    with pytest.raises(SystemExit) as refused:
        default.main(argv)
    assert refused.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "--repeats must be at least 1 (0 only with --fresh or --ci)")


def test_a_cold_start_is_a_fresh_clones_and_refused_without_one(capsys):
    with pytest.raises(SystemExit) as refused:
        default.main(["--cold"])
    assert refused.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith("--cold times the fresh clone: give --fresh too")
