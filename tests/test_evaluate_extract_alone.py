"""evaluate.extract of a log from elsewhere: no run directory, the settings read from what the log prints,
and the flags for what it does not say."""

import json
from pathlib import Path

import pytest

from evaluate import validate
from evaluate.logs import parse as logs
from tests.fixtures.data.verified import write_manifest
from tests.fixtures.logs.extracting import FIXTURES, TOKENS_PER_S_PER_GPU, extract_alone, run_extract, with_lines_before


def prepared_data(tmp_path):
    """A data prefix as data.verify leaves it: a tiny pair, its tokenizer and a manifest of the files' hashes."""
    prefix = tmp_path / "bc_llama_text_document"
    tokenizer = tmp_path / "tokenizers" / "llama"
    tokenizer.mkdir(parents=True)
    (tokenizer / "tokenizer.json").write_text("{}")
    Path(f"{prefix}.bin").write_bytes(bytes(16))
    Path(f"{prefix}.idx").write_bytes(b"MMIDIDX\x00\x00\x01" + bytes(7) + b"\x04" + bytes(16))
    write_manifest(prefix, tokenizer, "llama")
    return prefix


def test_a_megatron_lm_log_says_everything_but_the_platform(tmp_path, capsys):
    log = FIXTURES / "megatron_lm_arguments.log"
    code, result = extract_alone(tmp_path, log)
    assert (code, result) == (2, None)
    assert capsys.readouterr().err == (f"evaluate.extract: {log} does not say platform; give --platform amd|nvd|cpu\n")


def test_the_padded_vocabulary_tells_mistral_from_llama_which_share_every_other_number(tmp_path):
    text = (FIXTURES / "megatron_lm_arguments.log").read_text()
    log = tmp_path / "mistral.log"
    log.write_text(text.replace("padded vocab (size: 128256) with 0 dummy tokens (new size: 128256)",
                                "padded vocab (size: 32000) with 0 dummy tokens (new size: 32000)"))
    code, result = extract_alone(tmp_path, log, "--platform", "nvd", "--warmup-skip", "2")
    assert (code, result["model"]["variant"]) == (0, "mistral-7b-v0.1")
    code, result = extract_alone(tmp_path / "llama", FIXTURES / "megatron_lm_arguments.log", "--platform", "nvd",
                                 "--warmup-skip", "2")
    assert (code, result["model"]["variant"]) == (0, "llama3.1-8b")


def test_a_megatron_lm_log_with_the_platform_gives_a_result_that_validates(tmp_path, capsys):
    code, result = extract_alone(tmp_path, FIXTURES / "megatron_lm_arguments.log", "--platform", "nvd",
                                 "--warmup-skip", "2", "--data-prefix", str(prepared_data(tmp_path)))
    assert code == 0
    assert (result["platform"], result["framework"], result["model"]["variant"]) == ("nvd", "mega", "llama3.1-8b")
    assert {k: result["parallelism"][k] for k in ("tp", "pp", "dp", "ga", "num_gpus", "sequence_parallel",
                                                   "distributed_optimizer")} == \
        {"tp": 2, "pp": 1, "dp": 4, "ga": 16, "num_gpus": 8, "sequence_parallel": True, "distributed_optimizer": True}
    training = result["training"]
    assert {k: training[k] for k in ("steps", "mbs", "gbs", "seq_len", "precision", "lr", "min_lr", "warmup_steps",
                                     "seed", "lr_decay_style", "weight_decay", "beta2", "grad_clip")} == \
        {"steps": 12, "mbs": 2, "gbs": 128, "seq_len": 2048, "precision": "bf16", "lr": 3e-4, "min_lr": 3e-5,
         "warmup_steps": 5, "seed": 1234, "lr_decay_style": "cosine", "weight_decay": 0.1, "beta2": 0.95,
         "grad_clip": 1.0}
    assert result["performance"]["tokens_per_s_per_gpu"] == pytest.approx(TOKENS_PER_S_PER_GPU)
    assert result["run"]["commit"] is None  # a log from elsewhere did not run this checkout
    capsys.readouterr()
    assert validate.main([str(tmp_path / "result.json")]) == 0, capsys.readouterr().out


def test_data_changed_since_its_verification_gives_the_fingerprint_of_what_is_there_and_says_so(tmp_path):
    prefix = prepared_data(tmp_path)
    _, clean = extract_alone(tmp_path, FIXTURES / "megatron_lm_arguments.log", "--platform", "nvd",
                             "--data-prefix", str(prefix))
    Path(f"{prefix}.bin").write_bytes(b"\x01" + bytes(15))  # one byte changed, same size
    _, changed = extract_alone(tmp_path, FIXTURES / "megatron_lm_arguments.log", "--platform", "nvd",
                               "--data-prefix", str(prefix))
    assert changed["training"]["dataset_fingerprint"] != clean["training"]["dataset_fingerprint"]
    assert not any("not the verified data" in note for note in clean["warnings"])
    assert any("not the verified data" in note for note in changed["warnings"])


@pytest.mark.parametrize("line, platform, peak", [
    ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5c4e7a4d-09f1-2b7e-8a1c-3d9e0f6b2a71)", "nvd", 989.4),
    ("GPU[0]          : Card Series: AMD Instinct MI300X", "amd", 1307.4),
    ("node-1:4242:4242 [0] NCCL INFO NCCL version 2.21.5+cuda12.4", "nvd", None),
    ("RCCL version 2.27.7+hip7.1", "amd", None),
])
def test_the_platform_comes_from_a_device_or_collective_library_the_log_names(tmp_path, line, platform, peak):
    log = with_lines_before(tmp_path, "megatron_lm_arguments.log", line)
    code, result = extract_alone(tmp_path, log, "--warmup-skip", "2")
    assert code == 0 and result["platform"] == platform
    assert result["performance"]["peak_tflop_per_s_per_gpu"] == peak  # a named device gives MFU its peak


def test_without_such_a_line_the_platform_comes_from_the_system_description(tmp_path):
    system = tmp_path / "system.json"
    system.write_text(json.dumps({"gpu": {"vendor": "amd", "name": "AMD Instinct MI300X", "count": 8}}))
    code, result = extract_alone(tmp_path, FIXTURES / "megatron_lm_arguments.log", "--system", str(system),
                                 "--warmup-skip", "2")
    assert code == 0 and result["platform"] == "amd"
    assert "platform amd from system.json's GPU vendor (the log does not show it)" in result["warnings"]


def test_a_primus_log_needs_no_flag_at_all(tmp_path, monkeypatch):
    """Primus prints Megatron's dump (a Qwen model in FP8 here) and HIP memory fields: only ROCm has HIP."""
    monkeypatch.setenv("WARMUP_SKIP", "2")  # what a run would use: the environment over config.env
    code, result = extract_alone(tmp_path, FIXTURES / "primus_arguments.log")
    assert code == 0
    assert (result["platform"], result["framework"], result["model"]["variant"], result["training"]["precision"]) \
        == ("amd", "prim", "qwen2.5-7b", "fp8")
    assert {k: result["parallelism"][k] for k in ("tp", "pp", "dp", "ga")} == {"tp": 1, "pp": 1, "dp": 8, "ga": 16}
    assert result["performance"]["warmup_skip"] == 2
    assert "WARMUP_SKIP=2 from environment (no run directory gave it; --warmup-skip sets another)" in result["warnings"]
    assert result["performance"]["tokens_per_s_per_gpu"] == pytest.approx(TOKENS_PER_S_PER_GPU)


def test_a_nemo_log_says_its_layout_batch_and_model_but_not_its_precision_or_lr_schedule(tmp_path, capsys):
    log = FIXTURES / "nemo_settings.log"
    code, _ = extract_alone(tmp_path, log)
    assert code == 2
    assert capsys.readouterr().err == (
        f"evaluate.extract: {log} does not say platform, precision, minimum LR, LR warm-up steps; give "
        "--platform amd|nvd|cpu --precision bf16|fp8|mxfp8|mxfp4|nvfp4|fp32 --min-lr LR --warmup-steps N\n")
    code, result = extract_alone(tmp_path, log, "--platform", "nvd", "--precision", "bf16", "--min-lr", "3e-5",
                                 "--warmup-steps", "5", "--warmup-skip", "2")
    assert code == 0
    # the parallel groups give TP, PP and DP, the micro-batch count GA, and GBS / (DP x GA) the micro-batch size
    assert {k: result["parallelism"][k] for k in ("tp", "pp", "dp", "ga")} == {"tp": 1, "pp": 1, "dp": 8, "ga": 16}
    assert result["model"]["variant"] == "llama3.1-8b"  # 8,030,261,248 parameters with TP = PP = 1
    assert {k: result["training"][k] for k in ("mbs", "gbs", "seq_len", "steps", "lr", "seed", "grad_clip")} == \
        {"mbs": 1, "gbs": 128, "seq_len": 2048, "steps": 12, "lr": 3e-4, "seed": 1234, "grad_clip": 1.0}
    assert result["parallelism"]["distributed_optimizer"] is True


def test_a_flag_gives_what_the_log_does_not_say_and_overrides_the_run_request(tmp_path):
    """megatron.log does not print min_lr: the flag wins over config.json's 0.0; --tp equal to the log's is fine."""
    code, result = run_extract(tmp_path, "megatron.log", "config-nvd.json", "--min-lr", "3e-5", "--tp", "1")
    assert code == 0
    assert result["training"]["min_lr"] == 3e-5 and result["parallelism"]["tp"] == 1


def test_flags_that_contradict_the_log_are_refused_in_one_line_naming_both_values(tmp_path, capsys):
    log = with_lines_before(tmp_path, "megatron_lm_arguments.log", "NCCL version 2.21.5+cuda12.4")
    code, result = extract_alone(tmp_path, log, "--platform", "amd", "--tp", "4", "--variant", "qwen2.5-7b")
    assert (code, result) == (2, None)
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"evaluate.extract: {log} shows what ran, and these flags contradict it: ")
    assert "--platform amd (the log: nvd, from 'NCCL version 2.21.5+cuda12.4')" in err
    assert "--tp 4 (the log: 2)" in err
    assert "--variant qwen2.5-7b (the log's model: num_layers 32, hidden_size 4096" in err


def test_a_model_that_is_none_of_the_variants_is_refused(tmp_path, capsys):
    log = tmp_path / "other_model.log"
    text = (FIXTURES / "megatron_lm_arguments.log").read_text()
    log.write_text(text.replace(f"  num_layers {'.' * 38} 32", f"  num_layers {'.' * 38} 40"))
    code, _ = extract_alone(tmp_path, log, "--platform", "nvd")
    assert code == 2
    assert capsys.readouterr().err.startswith(
        f"evaluate.extract: {log}: the model (num_layers 40, hidden_size 4096, ffn_hidden_size 14336, "
        "num_attention_heads 32, num_kv_heads 8, qkv_bias False) is none of TPrimat's variants")


def test_the_missing_line_offers_only_the_variants_the_log_allows(tmp_path, capsys):
    """Two layers of width 128 are every tiny variant; the platform and schedule are given."""
    log = tmp_path / "tiny.log"
    log.write_text((FIXTURES / "nemo.log").read_text().replace('"tp": 1,', '"tp": 1, "num_layers": 2, "hidden_size": 128,'))
    code, _ = extract_alone(tmp_path, log, "--platform", "cpu", "--min-lr", "0", "--warmup-steps", "5", "--lr", "3e-4")
    assert code == 2
    assert capsys.readouterr().err == (f"evaluate.extract: {log} does not say model variant; give "
                                       "--variant llama3.1-8b-tiny|qwen2.5-7b-tiny|llama3.1-70b-tiny|"
                                       "mistral-7b-v0.1-tiny|llama3.2-3b-tiny|qwen3-30b-a3b-tiny|gpt-oss-20b-tiny\n")


def test_printed_settings_become_effective_settings_but_a_split_models_parameters_do_not():
    nemo = logs.parse_logs([FIXTURES / "nemo_settings.log"]).effective
    assert {k: nemo[k] for k in ("tp", "pp", "dp", "cp", "ga", "mbs", "parameters", "seq_len", "seed", "lr")} == \
        {"tp": 1, "pp": 1, "dp": 8, "cp": 1, "ga": 16, "mbs": 1, "parameters": 8030261248, "seq_len": 2048,
         "seed": 1234, "lr": 3e-4}
    assert "min_lr" not in nemo  # NeMo's OptimizerConfig prints min_lr=None: the scheduler holds it
    megatron = logs.parse_logs([FIXTURES / "megatron_lm_arguments.log"]).effective
    assert (megatron["num_kv_heads"], megatron["num_gpus"], megatron["qkv_bias"]) == (8, 8, False)
    assert "parameters" not in megatron  # rank (0, 0) holds half of a TP=2 model


def test_a_precision_the_platform_is_not_benchmarked_in_is_refused(tmp_path, capsys):
    """A Megatron-LM run with bf16 and fp8 off trained in fp32, which TPrimat runs on CPUs only."""
    log = with_lines_before(tmp_path, "megatron_lm_arguments.log", "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)")
    log.write_text(log.read_text().replace(f"  bf16 {'.' * 44} True", f"  bf16 {'.' * 44} False"))
    code, result = extract_alone(tmp_path, log, "--warmup-skip", "2")
    assert (code, result) == (2, None)
    assert capsys.readouterr().err == ("evaluate.extract: precision fp32 on nvd: TPrimat runs nvd in bf16, fp8, mxfp8, mxfp4 or "
                                       "nvfp4 only, "
                                       "so no result compares with it\n")


# NCCL 2.21's and RCCL's lines at a communicator's creation with NCCL_DEBUG=INFO (host:pid:tid [rank] prefix).
NET_IB = "gpu-01:4242:4301 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB ens1f0:10.0.0.1<0>"
USING_IB = "gpu-01:4242:4301 [0] NCCL INFO Using network IB"
USING_SOCKET = "gpu-02:5151:5190 [3] NCCL INFO Using network Socket"


@pytest.mark.parametrize("lines, transport, rdma", [
    ((NET_IB, USING_IB), "IB", True),
    (("gpu-01:4242:4301 [0] NCCL INFO NET/Socket : Using [0]ens1f0:10.0.0.1<0>", USING_SOCKET), "Socket", False),
    ((USING_IB, USING_SOCKET), "IB, Socket", False),  # one rank without RDMA slows every collective
    (("gpu-01:4242:4301 [0] NCCL INFO Using network AWS Libfabric",), "AWS Libfabric", None),  # a plugin: unknown
])
def test_the_collective_librarys_network_is_read_back_with_whether_it_is_rdma(tmp_path, lines, transport, rdma):
    effective = logs.parse_logs([with_lines_before(tmp_path, "primus.log", *lines)]).effective
    assert effective["collective_transport"] == transport
    assert effective.get("collective_rdma") is rdma


def test_communicators_created_once_training_runs_count_too(tmp_path):
    log = tmp_path / "megatron.log"
    text = (FIXTURES / "megatron.log").read_text()
    cut = text.index("\n", text.index(" iteration ")) + 1  # after the first iteration line
    log.write_text(text[:cut] + USING_SOCKET + "\n" + text[cut:])
    assert logs.parse_logs([log]).effective["collective_transport"] == "Socket"


def test_without_nccls_info_lines_the_transport_is_not_guessed():
    effective = logs.parse_logs([FIXTURES / "megatron.log"]).effective
    assert "collective_transport" not in effective and "collective_rdma" not in effective

