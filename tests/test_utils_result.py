"""utils.spec.result: every framework's run becomes one schema-valid shape with TPrimat's own figures."""

import json

import pytest

from utils.spec import stacks
from utils.spec.result import (SCHEMA_PATH, ResultError, build_result, schema, schema_errors, schema_field, table_enums,
                               write_result)

RUN = {"id": "run-1", "started_at": "2025-05-01T12:00:00+00:00", "ended_at": "2025-05-01T12:10:00+00:00",
       "status": "ok", "exit_code": 0, "error_excerpt": None, "commit": "abc123"}
PARALLELISM = {"strategy": "custom", "tp": 1, "pp": 1, "dp": 8, "ga": 16, "sequence_parallel": False,
               "distributed_optimizer": True}
TRAINING = {"steps": 6, "mbs": 1, "gbs": 128, "seq_len": 2048, "precision": "bf16", "lr": 3e-4, "min_lr": 0.0,
            "warmup_steps": 2, "seed": 42, "dataset": "bc", "dataset_fingerprint": "d" * 64,
            "tokenizer_fingerprint": "t" * 64, "mock_data": False}
STEP_TIMES = [9.0, 5.0, 2.0, 2.0, 4.0, 2.0]  # steps 1-2 are warm-up; the window's median is 2.0


def steps(times=STEP_TIMES):
    return [{"step": i, "step_time_s": t, "loss": 10.0 - i, "lr": 1e-4 * i, "grad_norm": 1.5, "skipped": 0,
             "nan": 0, "tokens": 128 * 2048, "mem_allocated_gib": 30.0 + i, "mem_reserved_gib": 40.0 + i}
            for i, t in enumerate(times, 1)]


def build(**overrides):
    args = dict(run=RUN, platform="nvd", framework="mega", variant="llama3.1-8b", system={},
                parallelism=PARALLELISM, training=TRAINING, steps=steps(), warmup_skip=2, num_gpus=8,
                device_name="NVIDIA H100 80GB HBM3")
    args.update(overrides)
    return build_result(**args)


def test_figures_come_from_the_steady_state_window():
    perf = build()["performance"]
    assert perf["window"] == {"first_step": 3, "last_step": 6, "count": 4}
    assert perf["step_time_s"]["median"] == 2.0
    assert perf["step_time_s"]["mean"] == 2.5
    assert perf["tokens_per_s"] == 128 * 2048 / 2.0
    assert perf["tokens_per_s_per_gpu"] == 128 * 2048 / 2.0 / 8
    assert perf["tflop_per_s_per_gpu"] == pytest.approx(46.64e9 * 16384 / 1e12, rel=1e-3)
    assert perf["mfu"] == pytest.approx(perf["tflop_per_s_per_gpu"] / 989.4)


def test_model_numbers_come_from_the_variant():
    model = build(variant="qwen2.5-7b")["model"]
    assert (model["key"], model["num_layers"], model["num_kv_heads"], model["qkv_bias"]) == ("qwen", 28, 4, True)
    assert model["parameters"] == pytest.approx(7.616e9, rel=1e-3)


def test_memory_is_the_peak_over_steps_and_series_keep_every_step():
    result = build()
    assert result["memory"] == {"peak_allocated_gib": 36.0, "peak_reserved_gib": 46.0}
    assert result["series"]["step"] == [1, 2, 3, 4, 5, 6]
    assert result["series"]["step_time_s"] == STEP_TIMES
    assert result["run"]["steps_completed"] == 6


def test_a_cpu_run_reports_the_peak_host_memory_of_its_workers():
    records = [{**record, "mem_allocated_gib": None, "mem_reserved_gib": None, "mem_host_rss_gib": 0.5 + record["step"] / 100}
               for record in steps()]
    result = build(platform="cpu", device_name=None, steps=records, host_rss_gib_per_worker=[0.61, 0.56],
                   training={**TRAINING, "precision": "fp32"})
    assert result["memory"] == {"peak_allocated_gib": None, "peak_reserved_gib": None, "peak_host_rss_gib": 0.61,
                                "host_rss_gib_per_worker": [0.61, 0.56]}
    assert result["series"]["mem_host_rss_gib"] == [0.51, 0.52, 0.53, 0.54, 0.55, 0.56]
    assert schema_errors(result) == []
    assert "mem_host_rss_gib" not in build()["series"]  # a source that does not measure it adds nothing


def test_nan_values_become_null_and_are_flagged():
    records = steps()
    records[3]["loss"] = float("nan")
    records[4]["grad_norm"] = float("inf")
    records[4]["nan"] = 1
    result = build(steps=records)
    assert result["series"]["loss"][3] is None
    assert result["health"]["nonfinite"] == [{"step": 4, "field": "loss"}, {"step": 5, "field": "grad_norm"}]
    assert result["health"]["nan_iterations"] == 1
    assert any("nan/inf" in w for w in result["warnings"])
    assert schema_errors(result) == []


def test_free_form_sections_become_strict_json():
    result = build(raw_framework={"tflop_per_s_per_gpu_avg_last": float("nan")}, effective={"lr": float("inf")})
    assert result["raw_framework"] == {"tflop_per_s_per_gpu_avg_last": None}
    assert result["effective"] == {"lr": None}


def test_unknown_device_leaves_mfu_empty_with_a_warning():
    result = build(device_name="Tesla V100-SXM2-32GB")
    assert result["performance"]["mfu"] is None
    assert result["performance"]["tokens_per_s_per_gpu"] is not None
    assert any("V100" in w for w in result["warnings"])


def test_a_run_that_died_in_warmup_is_still_a_valid_result():
    result = build(steps=steps([9.0]), run={**RUN, "status": "failed", "exit_code": 1, "error_excerpt": "OOM"})
    assert result["performance"]["window"] is None
    assert result["performance"]["tokens_per_s_per_gpu"] is None
    assert schema_errors(result) == []


def test_typos_in_input_sections_fail_loudly():
    with pytest.raises(ResultError, match="unknown.*tensor_parallel"):
        build(parallelism={**PARALLELISM, "tensor_parallel": 2})
    with pytest.raises(ResultError, match="missing.*seq_len"):
        build(training={k: v for k, v in TRAINING.items() if k != "seq_len"})
    with pytest.raises(ResultError, match="ISO 8601"):
        build(run={**RUN, "started_at": "yesterday"})
    with pytest.raises(ResultError, match="twice"):
        build(steps=steps() + steps()[:1])


def test_write_result_validates_and_writes_atomically(tmp_path):
    target = tmp_path / "run" / "result.json"
    write_result(target, build())
    assert json.loads(target.read_text())["schema_version"] == "1.10"
    assert [p.name for p in target.parent.iterdir()] == ["result.json"]

    broken = build()
    broken["run"]["status"] = "finished"
    with pytest.raises(ResultError, match="run/status"):
        write_result(tmp_path / "bad.json", broken)
    assert not (tmp_path / "bad.json").exists()


def test_nodes_their_names_and_the_interconnect_reach_the_result():
    system = {"nodes": 2, "node_names": ["gpu-01", "gpu-02"],
              "interconnect": {"infiniband": [{"device": "mlx5_0", "rates": ["400 Gb/sec (4X NDR)"],
                                               "link_layers": ["InfiniBand"]}], "interfaces": []}}
    result = build(system=system, parallelism={**PARALLELISM, "dp": 16}, num_gpus=16)
    assert result["parallelism"]["nnodes"] == 2  # the run set's node count, from the probe
    assert result["system"]["node_names"] == ["gpu-01", "gpu-02"]
    assert schema_errors(result) == []
    assert build(system=system, parallelism={**PARALLELISM, "nnodes": 1})["parallelism"]["nnodes"] == 1
    assert "nnodes" not in build(system={})["parallelism"]  # unknown stays out, never guessed


def test_results_of_schema_1_0_and_1_1_stay_valid():
    result = build()
    for version in ("1.0", "1.1"):
        result["schema_version"] = version
        assert schema_errors(result) == []
    result["schema_version"] = "0.9"
    assert schema_errors(result)


def test_a_requested_run_records_its_stack_and_the_image_digest_or_why_there_is_none(monkeypatch):
    from tests.fixtures.train_matrix.requests import run_request
    monkeypatch.setenv("TPRIMAT_RUNTIME", "docker")
    monkeypatch.setenv("TPRIMAT_IMAGE_DIGEST", "nvcr.io/nvidia/nemo@sha256:" + "a" * 64)
    sections = run_request("nvd", "nemo", "llama").result_sections()
    assert sections["stack"] == {"name": "nemo-25.04", "image": "nvcr.io/nvidia/nemo:25.04",
                                 "image_digest": "nvcr.io/nvidia/nemo@sha256:" + "a" * 64}
    assert schema_errors(build(stack=sections["stack"])) == []
    monkeypatch.setenv("TPRIMAT_IMAGE_DIGEST", "unknown")
    local = run_request("amd", "mega", "llama").result_sections()["stack"]
    assert local["name"] == stacks.default("amd").name and local["image_digest"] is None
    assert "no registry digest" in local["image_digest_note"]
    assert schema_errors(build(stack=local)) == []
    assert "stack" not in build()  # extracted from a log without its request: no stack to record


@pytest.mark.parametrize("path", list(table_enums()), ids="/".join)
def test_an_enum_of_table_names_comes_from_its_table_alone(path):
    """The loaded schema's enum is the table's names; the schema file spells none, so the table is its one source."""
    assert schema_field(schema(), path)["enum"] == list(table_enums()[path])
    assert "enum" not in schema_field(json.loads(SCHEMA_PATH.read_text()), path)


def test_a_name_outside_its_table_is_a_schema_violation():
    result = build()
    result["training"]["lr_warmup_convention"] = "linear"
    result["platform"] = "tpu"
    assert [line.split(":")[0] for line in schema_errors(result)] == ["platform", "training/lr_warmup_convention"]
