"""shell/data.sh and data.stage: the four stages chained for every model, each skipped while its stamp shows
its outputs current, FORCE=1 redoing it; on the CPU the bundled sample is prepared with no network."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def stage(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    """A stage that pretty-prints in.json into out.json (json.tool stands in for a data tool)."""
    command = [sys.executable, "-m", "data.stage", "--name", "demo", "--stamps", str(tmp_path / "stamps"),
               "--input", str(tmp_path / "in.json"), "--output", str(tmp_path / "out.json"), "--param", "k=1",
               *extra, "--", "json.tool", str(tmp_path / "in.json"), str(tmp_path / "out.json")]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True)


def test_a_stage_runs_once_then_only_when_something_changed(tmp_path):
    (tmp_path / "in.json").write_text('{"a": 1}')
    assert "running (never run)" in stage(tmp_path).stderr
    assert "up to date, skipped" in stage(tmp_path).stderr
    assert "running (FORCE=1)" in stage(tmp_path, "--force").stderr
    (tmp_path / "in.json").write_text('{"a": 2}')
    assert f"running (input {tmp_path / 'in.json'} changed)" in stage(tmp_path).stderr
    (tmp_path / "out.json").write_text("tampered")
    assert "is missing or was modified" in stage(tmp_path).stderr
    assert json.loads((tmp_path / "out.json").read_text()) == {"a": 2}
    assert "parameters changed" in stage(tmp_path, "--param", "k=2").stderr.replace("k=2", "")


def test_a_failed_stage_keeps_its_exit_code_and_runs_again_next_time(tmp_path):
    (tmp_path / "in.json").write_text('{"a": 1}')
    assert stage(tmp_path).returncode == 0
    (tmp_path / "in.json").write_text("not json")
    assert stage(tmp_path).returncode == 1
    assert not (tmp_path / "stamps" / "demo.json").exists()
    (tmp_path / "in.json").write_text('{"a": 1}')
    assert "running (never run)" in stage(tmp_path).stderr


def test_a_param_without_a_value_is_refused_in_one_line(tmp_path):
    (tmp_path / "in.json").write_text('{"a": 1}')
    out = stage(tmp_path, "--param", "k")
    assert out.returncode == 2
    assert out.stderr == "data.stage: error: --param k: expected KEY=VALUE; see python3 -m data.stage --help\n"
    assert not (tmp_path / "out.json").exists()


def sample_env(tmp_path: Path) -> dict:
    return {**os.environ, "PLATFORM": "cpu", "DATASET": "sample", "MODELS": "qwen", "DATA_DIR": str(tmp_path / "data"),
            "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "TPRIMAT_PYTHON": sys.executable, "FORCE": "0",
            "XDG_CACHE_HOME": str(tmp_path / "cache")}


def test_data_sh_prepares_the_sample_offline_and_skips_it_the_second_time(tmp_path):
    env = sample_env(tmp_path)
    first = subprocess.run(["bash", "shell/data.sh"], cwd=REPO, env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "OFFLINE tokenizer" in first.stderr and "data.verify: OK" in first.stderr
    manifest = json.loads((tmp_path / "data" / "sample_qwen_text_document.manifest.json").read_text())
    assert manifest["verified"] is True and manifest["tokenizer"]["fallback"] is True
    assert manifest["counts"]["tokens"] > 100_000  # enough for the CPU run: SL 128, dozens of steps of GBS 4
    assert manifest["source"]["dataset"] == "sample" and manifest["cleaning"]["kept"] > 500
    second = subprocess.run(["bash", "shell/data.sh"], cwd=REPO, env=env, capture_output=True, text=True)
    assert second.returncode == 0
    for name in ("fetch-sample", "clean-sample", "tokenizer-qwen", "encode-sample-qwen", "verify-sample-qwen"):
        assert f"{name}: up to date, skipped" in second.stderr


def test_ctrl_c_in_a_stage_is_the_tool_s_one_line_and_exit_130(tmp_path):
    from tests.test_data_encode import big_corpus, partial
    from tests.test_data_tokenizer import offline_tokenizer

    tokenizer = offline_tokenizer("qwen", tmp_path)
    prefix = tmp_path / "c"
    command = [sys.executable, "-m", "data.stage", "--name", "encode", "--stamps", str(tmp_path / "stamps"), "--",
               "data.encode", "--input", str(big_corpus(tmp_path)), "--tokenizer-model", str(tokenizer),
               "--output-prefix", str(prefix), "--workers", "2", "--append-eod", "--quiet"]
    proc = subprocess.Popen(command, cwd=REPO, start_new_session=True, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    deadline = time.monotonic() + 120
    while not partial(Path(f"{prefix}_text_document.bin")).exists():
        assert proc.poll() is None and time.monotonic() < deadline, "encode ended before Ctrl-C"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground process group
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.splitlines()[-1] == "data.encode: interrupted" and "Traceback" not in err
    assert err.count("interrupted") == 1


def test_the_sample_corpus_states_its_licence():
    note = (REPO / "data" / "sample" / "README.md").read_text()
    assert "public domain" in note and "sha256" in note


def test_the_data_package_is_this_repository_s():
    """`data` is a generic name: it must resolve to TPrimat's package, not an installed one."""
    import data
    assert Path(data.__file__).resolve().parent == REPO / "data"
