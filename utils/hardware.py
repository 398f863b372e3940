"""Peak dense TFLOP/s and memory of the benchmarked accelerators, matched by the name a device reports.

MFU divides TPrimat's own TFLOP/s/GPU by these peaks. A device that matches no entry gets no
peak (and so no MFU) and a warning: a guessed peak would make MFU look precise when it is not.
Figures: ../shared/reference/metrics.md (vendor data sheets, dense, no sparsity).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceSpec:
    """Data-sheet figures of one accelerator model."""

    name: str  # canonical name used in reports, e.g. "NVIDIA H100 SXM"
    vendor: str  # "nvidia" | "amd"
    bf16_tflops: float  # peak dense BF16 TFLOP/s
    fp8_tflops: float | None  # peak dense FP8 TFLOP/s; None where the data sheet gives none
    hbm_gb: float  # memory per device (GB as sold)
    hbm_tb_per_s: float | None  # memory bandwidth (TB/s); None where not listed

    def peak_tflops(self, precision: str) -> float | None:
        """Peak for a run's precision ("bf16" or "fp8")."""
        if precision == "bf16":
            return self.bf16_tflops
        if precision == "fp8":
            return self.fp8_tflops
        raise ValueError(f"unknown precision {precision!r}; expected bf16 or fp8")


# Order matters: the first pattern that matches the upper-cased device name wins, so the specific
# variants (NVL, PCIe) come before the generic H100 SXM entry. H100 SXM reports itself as
# "NVIDIA H100 80GB HBM3"; a bare "H100" (or "H200 NVL", which has lower clocks) matches nothing.
DEVICES: tuple[tuple[str, DeviceSpec], ...] = (
    (r"\bH100\b.*\bNVL\b", DeviceSpec("NVIDIA H100 NVL", "nvidia", 835, None, 94, None)),
    (r"\bH100\b.*\bPCIE\b", DeviceSpec("NVIDIA H100 PCIe", "nvidia", 756, None, 80, None)),
    (r"\bH100\b.*\b(SXM\w*|HBM3)\b", DeviceSpec("NVIDIA H100 SXM", "nvidia", 989, 1979, 80, 3.35)),
    (r"\bH200\b(?!.*\bNVL\b)", DeviceSpec("NVIDIA H200", "nvidia", 989, 1979, 141, 4.8)),
    (r"\bB200\b", DeviceSpec("NVIDIA B200", "nvidia", 2250, 4500, 180, 8.0)),
    (r"\bMI300X\b", DeviceSpec("AMD MI300X", "amd", 1307, 2615, 192, 5.3)),
    (r"\bMI325X\b", DeviceSpec("AMD MI325X", "amd", 1307, 2615, 256, 6.0)),
    (r"\bMI355X\b", DeviceSpec("AMD MI355X", "amd", 2500, 5000, 288, 8.0)),
)


def lookup_device(device_name: str | None) -> DeviceSpec | None:
    """The table entry for a reported device name, or None (with a warning) when none matches."""
    if not device_name:
        warnings.warn("no device name: peak TFLOP/s unknown, MFU left empty", stacklevel=2)
        return None
    upper = device_name.upper()
    for pattern, spec in DEVICES:
        if re.search(pattern, upper):
            return spec
    warnings.warn(f"device {device_name!r} is not in the peak TFLOP/s table (utils/hardware.py): "
                  "MFU left empty", stacklevel=2)
    return None


def peak_tflops(device_name: str | None, precision: str) -> float | None:
    """Peak dense TFLOP/s of a device at a precision, or None when unknown (warned)."""
    spec = lookup_device(device_name)
    if spec is None:
        return None
    peak = spec.peak_tflops(precision)
    if peak is None:
        warnings.warn(f"{spec.name} has no {precision.upper()} peak in the table: MFU left empty", stacklevel=2)
    return peak
