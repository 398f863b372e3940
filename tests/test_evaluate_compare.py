"""evaluate.compare: two fixture result sets, an NVIDIA node and an AMD node, become one comparison.

tests/fixtures/results/{nvd,amd}/ hold run sets as the trainer and extract write them (system.json
at the top, one directory per run); Llama ran twice per framework, Qwen once.
"""

import json
import shutil
import statistics
import zipfile
from pathlib import Path

import pytest

from evaluate import compare
from evaluate.comparison import plot as compare_plot
from evaluate.comparison import report
from evaluate.comparison import strategies as strategy_view
from evaluate.comparison.repeats import repeats_of
from evaluate.collect import load
from tests.fixtures.refigure import with_tokens_per_gpu

RESULTS = Path(__file__).parent / "fixtures" / "results"
SETS = [RESULTS / "nvd", RESULTS / "amd"]


def fixture_tokens(platform, run_prefix):
    values = [json.loads(p.read_text())["performance"]["tokens_per_s_per_gpu"]
              for p in sorted((RESULTS / platform).glob(f"{run_prefix}-r*/result.json"))]
    return values


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    text = compare.compare(SETS, out)
    return out, text


def test_plot_has_six_non_empty_panels_and_the_breakdown(tmp_path):
    items = load(SETS)
    drawn = compare_plot.plot(items, repeats_of(items), tmp_path / "compare.png")
    assert list(drawn) == ["tokens/s/GPU (higher is better; median, min-max bars)", "TFLOP/s/GPU (TPrimat's formula)",
                           "Peak memory per GPU", "Training loss", "Learning rate", "Step time",
                           "Step time breakdown (% of the step; the step's ms above each bar)"]
    breakdowns = drawn.pop("Step time breakdown (% of the step; the step's ms above each bar)")
    assert breakdowns == 0  # the fixtures predate the breakdown: each run is shown as "no breakdown"
    assert all(count > 0 for count in drawn.values())
    assert drawn["tokens/s/GPU (higher is better; median, min-max bars)"] == 8  # one bar per configuration
    assert drawn["Training loss"] == 12  # one line per run
    assert (tmp_path / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_table_numbers_equal_the_fixtures(made):
    _, text = made
    values = fixture_tokens("amd", "prim-llama")
    expected = f"{statistics.median(values):,.0f} [{min(values):,.0f}-{max(values):,.0f}]"
    llama = text.split("### Llama 3.1 8B")[1].split("###")[0]
    row = next(line for line in llama.splitlines() if line.startswith("| AMD MI300X | - | Primus"))
    assert f"| {expected} |" in row
    assert row.endswith("| 2 ok |")


def test_report_states_amd_vs_nvidia_speedups_per_model_and_framework(made):
    _, text = made
    prim = statistics.median(fixture_tokens("amd", "prim-llama"))
    nemo = statistics.median(fixture_tokens("nvd", "nemo-llama"))
    assert f"AMD MI300X + Primus is **{prim / nemo:.2f}x** NVIDIA H100 SXM + NeMo on Llama 3.1 8B" in text
    assert text.count("is **") == 8  # 2 AMD x 2 NVIDIA frameworks, 2 models


def test_report_names_workload_systems_and_flops_convention(made):
    out, text = made
    assert "SL 2048 | GBS 128 | BF16 | 20 steps" in text
    assert "8 x AMD Instinct MI300X" in text and "8 x NVIDIA H100 80GB HBM3" in text
    assert "Llama 3.1 8B, SL 2048: 46.64 GFLOP per token" in text
    assert "every compared run shares" in text and "MOCK DATA" not in text
    assert (out / "report.md").read_text() == text


def test_the_fairness_section_names_the_profile_and_what_nemo_and_megatron_cannot_share(made):
    _, text = made
    fairness = text.split("## Fairness")[1].split("\n## ")[0]
    assert "Fairness profile(s): spec" in fairness
    assert "- note: llama: LR warm-up convention differs" in fairness and "UNFAIR" not in text
    assert "They cannot be equal: NeMo 2.3's CosineAnnealing warm-up" in fairness


def test_a_workload_convention_that_differs_makes_the_comparison_unfair(tmp_path):
    shutil.copytree(SETS[1], tmp_path / "amd")
    path = tmp_path / "amd" / "prim-llama-r1" / "result.json"
    data = json.loads(path.read_text())
    data["training"]["eod_mask_loss"] = True  # Primus's shipped setting
    path.write_text(json.dumps(data))
    text = compare.compare([SETS[0], tmp_path / "amd"], tmp_path / "out")
    assert "**UNFAIR COMPARISON**" in text and "llama: EOD loss masking differs: false in " in text
    assert "; true in amd/prim-llama-r1" in text


def two_stacks(tmp_path):
    """The AMD set's Primus Llama runs, r1 on the older stack and r2 on the newest: otherwise the same work."""
    amd = tmp_path / "amd"
    shutil.copytree(SETS[1], amd)
    for run, stack in (("prim-llama-r1", "primus-v25.11"), ("prim-llama-r2", "primus-v26.5")):
        path = amd / run / "result.json"
        data = json.loads(path.read_text())
        data.update(schema_version="1.5", stack={"name": stack, "image": f"rocm/primus:{stack.split('-')[1]}",
                                                 "image_digest": None, "image_digest_note": "not pulled"})
        path.write_text(json.dumps(data))
    return amd


def test_two_stacks_of_one_vendor_are_two_rows_and_a_stack_comparison_not_an_unfairness(tmp_path):
    text = compare.compare([two_stacks(tmp_path)], tmp_path / "out")
    llama = text.split("### Llama 3.1 8B")[1].split("###")[0]
    assert "| Device | Stack | Framework |" in llama
    rows = [line for line in llama.splitlines() if line.startswith("| AMD MI300X | primus-")]
    assert [row.split(" | ")[1] for row in rows] == ["primus-v25.11", "primus-v26.5"]
    assert all(row.endswith("| 1 ok |") for row in rows)  # not repeats of each other
    assert "UNFAIR" not in text
    assert ("- note: llama3.1-8b with prim on amd, TP1 PP1 DP8 GA16: the runs differ only in their stack "
            "(primus-v25.11 in amd/prim-llama-r1; primus-v26.5 in amd/prim-llama-r2): a stack comparison of one "
            "vendor, not an unfairness") in text


def test_reading_a_zip_equals_reading_the_directory(tmp_path, made):
    _, text = made
    archive = tmp_path / "output.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(RESULTS.glob("nvd/**/*.json")):
            zf.write(path, Path("output") / path.relative_to(RESULTS))
    assert compare.compare([archive, SETS[1]], tmp_path / "from-zip") == text


def test_unfair_sets_and_mock_data_are_stated_loudly(tmp_path):
    amd = tmp_path / "amd"
    shutil.copytree(SETS[1], amd)
    result_path = amd / "prim-llama-r1" / "result.json"
    result = json.loads(result_path.read_text())
    result["training"]["seq_len"] = 4096
    result["training"]["mock_data"] = True
    result_path.write_text(json.dumps(result))
    text = compare.compare([SETS[0], amd], tmp_path / "out")
    assert "**UNFAIR COMPARISON**" in text
    assert "llama: sequence length differs: 2048 in" in text
    assert "**MOCK DATA**: amd/prim-llama-r1" in text


def test_console_prints_the_report(tmp_path, capsys):
    assert compare.main([*map(str, SETS), "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# TPrimat comparison") and "## AMD vs NVIDIA" in out
    assert (tmp_path / "compare.png").stat().st_size > 50_000


def test_no_results_is_bad_input(tmp_path, capsys):
    assert compare.main([str(tmp_path), "-o", str(tmp_path / "out")]) == 2
    assert "no result.json" in capsys.readouterr().err


STRATEGIES = (("minimal_communication", (1, 1, 8, 16)), ("balanced", (2, 1, 4, 32)), ("truly_identical", (4, 1, 2, 64)))


def sweep(tmp_path, factors):
    """Llama results re-labelled as a strategy sweep; factors[platform][strategy] scales tokens/s/GPU."""
    root = tmp_path / "sweep"
    for platform, framework in (("nvd", "nemo"), ("amd", "prim")):
        (root / platform).mkdir(parents=True)
        shutil.copy(RESULTS / platform / "system.json", root / platform / "system.json")
        for strategy, layout in STRATEGIES:
            data = json.loads((RESULTS / platform / f"{framework}-llama-r1" / "result.json").read_text())
            data["parallelism"].update(strategy=strategy, tp=layout[0], pp=layout[1], dp=layout[2], ga=layout[3])
            data["effective"].update({k: v for k, v in data["parallelism"].items() if k in data["effective"]})
            with_tokens_per_gpu(data, factors[platform][strategy])
            data["run"]["id"] = f"{framework}-llama-{strategy}"
            (root / platform / data["run"]["id"]).mkdir()
            (root / platform / data["run"]["id"] / "result.json").write_text(json.dumps(data))
    return [root / "nvd", root / "amd"]


def test_strategy_sweep_marks_the_best_and_compares_best_and_identical_layouts(tmp_path):
    factors = {"nvd": {"minimal_communication": 3000.0, "balanced": 2900.0, "truly_identical": 3300.0},
               "amd": {"minimal_communication": 4000.0, "balanced": 3500.0, "truly_identical": 3100.0}}
    text = compare.compare(sweep(tmp_path, factors), tmp_path / "out")
    amd_table = text.split("### Llama 3.1 8B on AMD MI300X")[1].split("###")[0]
    assert "| minimal_communication **best** | Primus | 1/1/8/16 | 4,000 |" in amd_table
    assert amd_table.count("**best**") == 1
    assert f"best vs best: AMD MI300X + Primus (minimal_communication, 4,000) is **{4000 / 3300:.2f}x**" in text
    assert f"identical vs identical: AMD MI300X + Primus (truly_identical, 3,100) is **{3100 / 3300:.2f}x**" in text
    assert (tmp_path / "out" / "compare-strategies.png").stat().st_size > 20_000


def test_strategy_plot_draws_every_strategy_of_every_configuration(tmp_path):
    factors = {p: {s: 1000.0 + i for i, (s, _) in enumerate(STRATEGIES)} for p in ("nvd", "amd")}
    items = load(sweep(tmp_path, factors))
    entries = strategy_view.entries(repeats_of(items))
    drawn = strategy_view.plot(entries, tmp_path / "s.png")
    assert drawn == {"Llama 3.1 8B: tokens/s/GPU": 6, "Llama 3.1 8B: peak memory per GPU": 6}


def test_a_single_strategy_has_no_strategy_view(made):
    out, text = made
    assert "## Strategies" not in text and not (out / "compare-strategies.png").exists()


def two_nodes(tmp_path, per_gpu_factor):
    """The NVIDIA run set as if rerun on two such nodes: DP, GPUs and global batch doubled, each GPU
    per_gpu_factor as fast as on one node."""
    root = tmp_path / "nvd-2nodes"
    shutil.copytree(RESULTS / "nvd", root)
    system = json.loads((root / "system.json").read_text())
    system.update(nodes=2, node_names=["h100-node", "h100-node-2"])
    (root / "system.json").write_text(json.dumps(system))
    for path in root.glob("*/result.json"):
        data = json.loads(path.read_text())
        par, perf = data["parallelism"], data["performance"]
        par.update(dp=par["dp"] * 2, num_gpus=par["num_gpus"] * 2, nnodes=2)
        data["training"]["gbs"] *= 2
        data["effective"].update({k: v for k, v in {**par, "gbs": data["training"]["gbs"]}.items()
                                  if k in data["effective"]})
        with_tokens_per_gpu(data, perf["tokens_per_s_per_gpu"] * per_gpu_factor)
        data["system"] = system
        path.write_text(json.dumps(data))
    return root


def test_scaling_reports_efficiency_and_speedup_of_each_workload_from_one_to_two_nodes(tmp_path):
    text = compare.compare([RESULTS / "nvd", two_nodes(tmp_path, 0.9)], tmp_path / "out")
    one = statistics.median(fixture_tokens("nvd", "mega-llama"))
    scaling = text.split("## Scaling")[1].split("\n## ")[0]
    assert scaling.count("**Llama 3.1 8B** on NVIDIA H100 SXM + ") == 2  # Megatron and NeMo
    megatron = scaling.split("**Llama 3.1 8B** on NVIDIA H100 SXM + Megatron (TP 1, PP 1, SL 2048, MBS 1, BF16, "
                             "8 GPUs per node)")[1].split("**")[0]
    assert f"| 1 | 8 | 128 | {one:,.0f} | {one * 8:,.0f} | 1.00 | 1.00x (ideal 1x) | 2 |" in megatron
    assert f"| 2 | 16 | 256 | {one * 0.9:,.0f} | {one * 0.9 * 16:,.0f} | 0.90 | 1.80x (ideal 2x) | 2 |" in megatron
    assert "weak scaling" in scaling and "the global batch grows" in scaling
    assert ("**Scaling**: Llama 3.1 8B on NVIDIA H100 SXM + Megatron keeps 90% of its 1-node tokens/s/GPU on 2 nodes "
            "(1.80x the total tokens/s, ideal 2x).") in text.split("## Workload")[0]
    assert "UNFAIR" not in text  # the global batch differs only between node counts


def test_one_and_two_node_runs_are_separate_rows_and_systems(tmp_path):
    text = compare.compare([RESULTS / "nvd", two_nodes(tmp_path, 0.95)], tmp_path / "out")
    llama = text.split("### Llama 3.1 8B")[1].split("###")[0]
    assert llama.count("| NVIDIA H100 SXM | - | Megatron | custom | 1 | 8 | 1/1/8/16 |") == 1
    assert llama.count("| NVIDIA H100 SXM | - | Megatron | custom | 2 | 16 | 1/1/16/16 |") == 1
    assert "(2 nodes: h100-node, h100-node-2)" in text and "(h100-node, 1 node)" in text
    assert "interconnect: mlx5_0 (400 Gb/sec (4X NDR))" in text


def test_results_of_a_single_node_count_have_no_scaling_section(made):
    _, text = made
    assert "## Scaling" not in text and "**Scaling**" not in text


def test_the_interconnect_is_described_as_the_probe_saw_it():
    roce = {"infiniband": [{"device": "mlx5_0", "rates": ["200 Gb/sec (4X HDR)"], "link_layers": ["Ethernet"]},
                           {"device": "efa_0", "rates": [], "link_layers": []}], "interfaces": []}
    assert report.interconnect_text(roce) == "mlx5_0 (RoCE, 200 Gb/sec (4X HDR)), efa_0"
    tcp = {"infiniband": [], "interfaces": [{"name": "eth0", "speed_mbps": 25000}, {"name": "eth1", "speed_mbps": None}]}
    assert report.interconnect_text(tcp) == "no InfiniBand/RoCE adapter; eth0 (25 Gb/s), eth1"
    assert report.interconnect_text({"infiniband": [], "interfaces": []}) == "no InfiniBand/RoCE adapter seen"
    assert report.interconnect_text(None) == "not recorded"


def test_cpu_runs_show_the_peak_host_memory_of_their_workers_labelled_as_host(tmp_path):
    cpu = tmp_path / "cpu"
    shutil.copytree(SETS[0], cpu)
    for path in cpu.glob("*/result.json"):
        result = json.loads(path.read_text())
        result["platform"] = "cpu"
        result["memory"] = {"peak_allocated_gib": None, "peak_reserved_gib": None, "peak_host_rss_gib": 0.75,
                            "host_rss_gib_per_worker": [0.7, 0.75]}
        for key in ("mem_allocated_gib", "mem_reserved_gib"):  # a CPU has no device memory: its peaks are null
            result["series"][key] = [None] * len(result["series"]["step"])
        path.write_text(json.dumps(result))
    items = load([cpu])
    drawn = compare_plot.plot(items, repeats_of(items), tmp_path / "compare.png")
    assert drawn["Peak host memory per worker (resident, CPU)"] > 0
    text = compare.compare([cpu], tmp_path / "out")
    row = next(line for line in text.splitlines() if line.startswith("| CPU | - | Megatron"))
    assert "| 0.75 [0.75-0.75] (host) |" in row  # three significant digits: utils.spec.metrics.figure_text
    assert "host = peak resident host memory of the largest worker process" in text


def test_a_cpu_figure_keeps_its_significant_digits_in_the_report_and_the_console(tmp_path, capsys):
    cpu = tmp_path / "cpu"
    shutil.copytree(SETS[0], cpu)
    for path in cpu.glob("*/result.json"):
        result = json.loads(path.read_text())
        result["platform"], result["performance"]["peak_tflop_per_s_per_gpu"] = "cpu", None
        tflops = result["performance"]["tflop_per_s_per_gpu"]
        with_tokens_per_gpu(result, result["performance"]["tokens_per_s_per_gpu"] * 0.0472 / tflops)
        path.write_text(json.dumps(result))
    assert compare.main([str(cpu), "-o", str(tmp_path / "out")]) == 0
    console = capsys.readouterr().out
    for text in ((tmp_path / "out" / "report.md").read_text(), console):
        row = next(line for line in text.splitlines() if line.startswith("| CPU | - | Megatron"))
        assert "| 0.0472 [0.0472-0.0472] |" in row  # TFLOP/s/GPU, not 0.0
