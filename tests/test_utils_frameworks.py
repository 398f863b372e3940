"""utils.frameworks: the one table of the frameworks, which the configuration, the workload and the judge read."""

from utils import frameworks
from utils.config import FRAMEWORKS
from utils.spec.fairness import workload


def test_each_platform_runs_megatron_its_vendors_framework_and_the_torch_native_ones():
    assert {platform: frameworks.on(platform) for platform in ("nvd", "amd", "cpu")} == \
        {"nvd": ("mega", "nemo", "fsdp", "autotp"), "amd": ("mega", "prim", "fsdp", "autotp"),
         "cpu": ("mega", "fsdp", "autotp")}
    assert [name for name in frameworks.NAMES if frameworks.torch_native(name)] == list(frameworks.NATIVE)


def test_a_vendors_framework_is_the_one_only_its_platform_runs():
    assert [frameworks.vendor_framework(p) for p in ("nvd", "amd", "cpu")] == ["nemo", "prim", None]


def test_the_configuration_knows_exactly_the_tables_frameworks():
    assert FRAMEWORKS == frameworks.NAMES == ("mega", "prim", "nemo", "fsdp", "autotp")


def test_the_workload_records_each_frameworks_warm_up_convention():
    assert {name: workload(name, 128256, 1)["lr_warmup_convention"] for name in frameworks.NAMES} == \
        {"mega": "megatron", "prim": "megatron", "nemo": "nemo-cosine-annealing", "fsdp": "megatron",
         "autotp": "megatron"}


def test_tprimats_own_trainers_write_their_result_and_the_vendors_logs_are_extracted():
    assert [name for name, spec in frameworks.TABLE.items() if spec.writes_result] == ["mega", "fsdp", "autotp"]
