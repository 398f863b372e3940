"""evaluate.validate: the machine behind a result's figures (issue 22): power, energy, throttling, stragglers and
node health, from the telemetry of tests/fixtures/energy_results.py (8 MI300X at 600 W, 8 H100 at 500 W)."""

from evaluate import validate
from tests.fixtures import energy_results


def machine_findings(item):
    return [f for f in validate.check_result(item) if f.check in ("power", "energy", "throttling", "straggler",
                                                                    "node health")]


def test_sound_telemetry_passes():
    assert machine_findings(energy_results.amd()) == [] and machine_findings(energy_results.nvd()) == []


def test_power_above_what_the_device_can_draw_fails_naming_the_gpu_and_the_board_power():
    item = energy_results.changed(energy_results.amd(), per_gpu={4: {"max_power_w": 900.0}})  # MI300X: 750 W
    found = machine_findings(item)
    assert [(f.check, f.fatal) for f in found] == [("power", True)]
    assert found[0].message.startswith("GPU 4 on node-0: max_power_w 900 W is more than AMD MI300X's board power "
                                       "(utils/machine/hardware.py), 750 W, allows")


def test_power_within_a_samples_averaging_of_the_board_power_passes():
    item = energy_results.changed(energy_results.amd(), per_gpu={4: {"max_power_w": 800.0}})  # 750 W + 10%
    assert machine_findings(item) == []


def test_a_device_the_table_lacks_is_held_to_the_highest_board_power():
    item = energy_results.changed(energy_results.nvd(), per_gpu={0: {"name": "NVIDIA X999", "max_power_w": 1600.0},
                                                                 1: {"name": "NVIDIA X999", "max_power_w": 1500.0}})
    found = machine_findings(item)
    assert len(found) == 1 and "GPU 0 on node-0" in found[0].message
    assert "the highest board power in utils/machine/hardware.py, 1400 W" in found[0].message


def test_a_cpu_package_above_any_cpus_limit_fails():
    cpu = energy_results.cpu_without_sensor()
    item = energy_results.changed(cpu, power_sensor=True, per_gpu={0: {"mean_power_w": 1200.0}})
    found = machine_findings(item)
    assert [(f.check, f.fatal) for f in found] == [("power", True)] and "a CPU package" in found[0].message


def test_an_energy_counter_that_went_backwards_fails():
    item = energy_results.changed(energy_results.nvd(), per_gpu={2: {"energy_j": -1500.0}})
    found = machine_findings(item)
    assert [(f.check, f.fatal) for f in found] == [("energy", True)]
    assert found[0].message == ("GPU 2 on node-0: -1500 J over the steady-state steps: the energy counter went "
                                "backwards (reset or wrapped during the run)")


def test_steady_state_throttling_warns_naming_the_reason_gpu_and_steps():
    found = machine_findings(energy_results.throttled_nvd())
    assert [(f.check, f.fatal, f.message) for f in found] == [
        ("throttling", False, "GPU 3 on node-0 throttled (sw_power_cap) for 12.0 s during steady-state steps 4-5")]


def test_health_problems_of_the_node_warn_one_line_each():
    found = machine_findings(energy_results.amd(health=energy_results.UNHEALTHY))
    assert [(f.check, f.fatal) for f in found] == [("node health", False)]
    assert found[0].message == energy_results.UNHEALTHY["problems"][0]["line"]


def test_a_flagged_straggler_warns():
    found = machine_findings(energy_results.with_straggler(energy_results.nvd()))
    assert [(f.check, f.fatal) for f in found] == [("straggler", False)]
    assert found[0].message.startswith("GPU 5 on node-0 is 9.0% slower than the median")


def test_cli_fails_a_result_with_impossible_power(tmp_path, capsys):
    item = energy_results.changed(energy_results.amd(), per_gpu={0: {"mean_power_w": 5000.0}})
    sets = energy_results.write_set(tmp_path, item)
    assert validate.main([str(s) for s in sets]) == 1
    assert "FAIL amd/mega-llama-r1: power: GPU 0 on node-0: mean_power_w 5000 W" in capsys.readouterr().out
