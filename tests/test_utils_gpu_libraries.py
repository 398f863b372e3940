"""utils.machine.gpu_libraries: NVML and amdsmi opened once for node health and telemetry, against the fake pynvml and
amdsmi (tests/fakes): a query the device does not support answers None, any other error is a GpuError (or, in a
tolerant session, None with a lost GPU remembered), a missing binding or driver is Unavailable in one line."""

from __future__ import annotations

import sys

import pytest

from utils.machine.gpu_libraries import Amdsmi, GpuError, Nvml, amd_field, nvml_reasons
from utils.machine.vendor_tools import Unavailable

H100 = {"name": "NVIDIA H100 80GB HBM3", "temp_gpu_c": 40, "memory_used_mib": 1024, "throttle": ["sw_thermal"],
        "not_supported": ["power"]}


@pytest.mark.parametrize("session", [Nvml, Amdsmi])
def test_an_unsupported_query_is_none_and_a_lost_gpu_an_error_unless_tolerant(gpus, session):
    gpus(H100, {**H100, "fail_after": 0})  # every query of GPU 1 answers GPU-is-lost
    strict = session.open()
    handles = strict.handles() if session is Nvml else strict.handles
    power = "nvmlDeviceGetPowerUsage" if session is Nvml else "amdsmi_get_power_info"
    assert strict.ask(power, handles[0]) is None and strict.ask("no_such_call", handles[0]) is None
    assert (strict.temp_c(handles[0]), strict.memory_used_mib(handles[0])) == (40, 1024)
    with pytest.raises(GpuError) as lost:
        strict.temp_c(handles[1])
    assert lost.value.lost == (session is Nvml)
    strict.close()
    tolerant = session.open(tolerant=True)
    assert tolerant.temp_c(handles[1]) is None and tolerant.lost == (session is Nvml)
    tolerant.close()


def test_the_throttle_reasons_are_named_on_either_name_of_the_call(gpus, monkeypatch):
    gpus(H100)
    nv = Nvml.open()
    (handle,) = nv.handles()
    assert nv.reasons(handle) == ["sw_thermal"]
    monkeypatch.delattr(nv.lib, "nvmlDeviceGetCurrentClocksEventReasons")  # nvidia-ml-py before 12.535
    assert nv.reasons(handle) == ["sw_thermal"] and nv.bus_id(handle) == "00000000:18:00.0"
    assert nvml_reasons(0x1) == [] and nvml_reasons(None) is None  # GPU idle is not a throttle


def test_a_missing_binding_or_driver_is_unavailable_in_one_line(gpus, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(Unavailable, match="^nvidia-ml-py \\(pynvml\\) is not installed$"):
        Nvml.open()
    monkeypatch.setenv("TPRIMAT_FAKE_GPUS", "")  # the driver is not loaded
    with pytest.raises(Unavailable, match="^amdsmi: "):
        Amdsmi.open()


def test_amdsmi_fields_answering_n_a_are_not_read():
    assert amd_field({"vram_used": "N/A", "clk": 2100}, "vram_used") is None
    assert amd_field({"clk": 2100}, "clk") == 2100 and amd_field(None, "clk") is None
