"""bench/gpu_check.sh, as far as a CPU goes: its dry run plans TPrimat's one-GPU runs of Llama 3.1 8B's first layers
on prepared sample data (mega and mbridge on megatron-core's local layers where the GPU has no Transformer Engine)
and writes the commands and settings the GPU machine would run; Megatron-LM's pretrain_gpt.py gets the same workload
through Megatron-LM's own argument parser (bench/megatron_lm_args.py); what the script is given wrong stops it in one
line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from tests.fixtures.train.data_dir import make_data_dir
from tests.shell_harness import REPO

SCRIPT = REPO / "bench" / "gpu_check.sh"


def check(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TPRIMAT_HOST_PYTHON": sys.executable}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_its_dry_run_writes_the_one_gpu_command_and_the_settings_of_a_few_layers(tmp_path):
    data = make_data_dir(tmp_path / "data", model_keys=("llama",), documents=60)
    out = check("--data", str(data), "--out", str(tmp_path / "out"), "--dry-run", "--steps", "12", "--layers", "2",
                "--frameworks", "torchtitan")
    assert out.returncode == 0, out.stderr
    run_dir = tmp_path / "out" / "torchtitan-llama"
    command = json.loads((run_dir / "launch.json").read_text())["command"]
    assert "--nproc_per_node=1" in command and command[-6:-4] == ["-m", "torchtitan.train"]
    settings = json.loads((run_dir / "torchtitan_settings.json").read_text())
    assert (settings["model"]["num_layers"], settings["model"]["dim"]) == (2, 4096)
    assert (settings["set"]["training.steps"], settings["set"]["training.global_batch_size"]) == (12, 8)


def test_without_prepared_data_or_with_too_few_steps_it_stops_in_one_line(tmp_path):
    missing = check("--data", str(tmp_path / "none"), "--dry-run")
    few = check("--steps", "3", "--dry-run")
    assert (missing.returncode, few.returncode) == (2, 2)
    assert "no prepared data at" in missing.stderr and "./shell/run_data.sh" in missing.stderr
    assert few.stderr.strip().count("\n") == 0 and "--steps 3" in few.stderr


def test_a_low_precision_run_with_validation_goes_beside_its_bf16_twin(tmp_path):
    data = make_data_dir(tmp_path / "data", model_keys=("llama",), documents=60)
    out = check("--data", str(data), "--out", str(tmp_path / "out"), "--dry-run", "--frameworks", "fsdp",
                "--precision", "fp8", "--eval-interval", "5")
    assert out.returncode == 0, out.stderr
    config = json.loads((tmp_path / "out" / "fsdp-llama-fp8" / "config.json").read_text())
    assert config["training"]["precision"] == "fp8"
    assert (config["evaluation"]["interval_steps"], config["evaluation"]["validation_percent"]) == (5, 20)
    bad = check("--data", str(data), "--dry-run", "--eval-interval", "often")
    assert bad.returncode == 2 and "--eval-interval often" in bad.stderr


def test_mega_and_mbridge_run_megatron_cores_local_layers_as_a_recorded_setting(tmp_path):
    data = make_data_dir(tmp_path / "data", model_keys=("llama",), documents=60)
    out = check("--data", str(data), "--out", str(tmp_path / "out"), "--dry-run", "--frameworks", "mega,mbridge,fsdp")
    assert out.returncode == 0, out.stderr
    requests = {name: json.loads((tmp_path / "out" / f"{name}-llama" / "config.json").read_text())
                for name in ("mega", "mbridge", "fsdp")}
    assert {r["environment"]["transformer_impl"] for r in requests.values()} == {"local"}
    settings = json.loads((tmp_path / "out" / "mbridge-llama" / "mbridge_settings.json").read_text())
    assert settings["transformer_impl"] == "local" and settings["set"]["model.transformer_impl"] == "local"


def test_megatron_lm_needs_its_files_and_the_pinned_commit(tmp_path):
    data = make_data_dir(tmp_path / "data", model_keys=("llama",), documents=60)
    absent = check("--data", str(data), "--dry-run", "--frameworks", "megatron-lm",
                   "--megatron-lm", str(tmp_path / "none"))
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    other = check("--megatron-lm-from", str(tmp_path / "repo"), "--megatron-lm", str(tmp_path / "mlm"))
    assert (absent.returncode, other.returncode) == (2, 2)
    assert "no pretrain_gpt.py in" in absent.stderr and "--megatron-lm-from" in absent.stderr
    assert "no Megatron-LM commit" in other.stderr and not (tmp_path / "mlm").exists()


def test_the_table_shows_gated_figures_and_says_when_the_reference_is_missing(tmp_path, capsys):
    from bench import gpu_check_table

    shutil.copytree(REPO / "tests" / "fixtures" / "results" / "nvd", tmp_path / "out")
    (tmp_path / "out" / "health.json").write_text(json.dumps({"method": "nvml", "ok": True, "problems": [],
                                                              "notes": ["no InfiniBand port"]}))
    assert gpu_check_table.main([str(tmp_path / "out"), "-o", str(tmp_path / "table.md")]) == 0
    lines = (tmp_path / "table.md").read_text().splitlines()
    assert lines[0] == gpu_check_table.HEAD and len(lines[0].split("|")) == len(lines[1].split("|"))
    rows = [line for line in lines if line.startswith("| mega-llama-r1 |")]
    assert len(rows) == 1 and len(rows[0].split("|")) == len(lines[0].split("|"))
    assert "mega / pretrain_gpt.py tokens/s/GPU: - (a run is missing or failed its checks)" in lines
    assert "- note: no InfiniBand port" in lines
    assert gpu_check_table.main([str(tmp_path / "none")]) == 2


def test_megatron_lms_script_runs_as_itself_with_compile_helpers_answered_where_the_helpers_are_built(tmp_path):
    script = tmp_path / "checkout" / "pretrain_gpt.py"  # stands for pretrain_gpt.py: what it sees, and the call
    script.parent.mkdir()
    script.write_text("import json, sys\nfrom megatron.core.datasets.utils import compile_helpers\n"
                      "compile_helpers()\nprint(json.dumps([__name__, sys.argv, sys.path[0]]))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "bench.megatron_lm_pretrain", str(script), "--train-iters", "20"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]  # upstream's compile_helpers exits 1: no Makefile in the wheel
    assert "answered without make" in out.stdout
    assert json.loads(out.stdout.splitlines()[-1]) == ["__main__", [str(script), "--train-iters", "20"],
                                                       str(script.parent)]
    dry = (REPO / "bench" / "gpu_check.sh").read_text()
    assert "-m bench.megatron_lm_pretrain \"${megatron_lm}/pretrain_gpt.py\"" in dry
