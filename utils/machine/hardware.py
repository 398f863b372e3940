"""Facts about the hardware a run uses: the accelerators' peaks, and whether a CPU computes bf16 natively.

MFU divides TPrimat's own TFLOP/s/GPU by the peaks of the device table. A device that matches no
entry gets no peak (and so no MFU) and a warning: a guessed peak would make MFU look precise when
it is not. Figures: ../shared/reference/metrics.md (vendor data sheets, dense, no sparsity), to the
decimal the data sheet gives: an H100 SXM's 989.4 rounded to 989 would overstate every MFU by 0.04%.

On the CPU platform the precision follows the processor: PyTorch has fast bf16 matrix kernels only
where the CPU has bf16 instructions; elsewhere a bf16 product is emulated and tens of times slower
than fp32 (45x measured on an AVX2-only EPYC for the LM head of a tiny model). Standard library only:
utils.config decides the CPU precision with it before any environment exists.
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from utils.spec.precision import PEAK_CLASS

CPUINFO = Path("/proc/cpuinfo")
# The /proc/cpuinfo flags of bf16 instructions PyTorch's CPU kernels use (oneDNN): x86's AVX-512 BF16
# and AMX, and Arm's BF16 extension (listed as "bf16" in the Features line of aarch64).
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


@dataclass(frozen=True)
class DeviceSpec:
    """Data-sheet figures of one accelerator model."""

    name: str  # canonical name used in reports, e.g. "NVIDIA H100 SXM"
    vendor: str  # "nvidia" | "amd"
    bf16_tflops: float  # peak dense BF16 TFLOP/s
    fp8_tflops: float | None  # peak dense FP8 TFLOP/s (MXFP8 too); None where the data sheet gives none
    memory_gib: float | None = None  # device memory as the device reports it (GiB): what a plan must fit in
    intra_gb_s: float | None = None  # GPU-to-GPU bandwidth inside a node, GB/s per direction per GPU (all links)
    memory_gb_s: float | None = None  # rated device-memory bandwidth of the data sheet, GB/s (MEMORY_GB_S)
    max_power_w: float | None = None  # maximum board power (TDP / TBP) of the data sheet, W: no sample is above it
    idle_power_w: float | None = None  # the least a working device of the model draws, W: no mean over steps is below
    fp6_tflops: float | None = None  # peak dense FP6 (MXFP6) TFLOP/s; None: no FP6 matrix units
    fp4_tflops: float | None = None  # peak dense FP4 (MXFP4, NVFP4) TFLOP/s; None: no FP4 matrix units
    # The PRECISION values its matrix units run (utils.spec.precision): FP8 on Hopper and CDNA 3, the OCP MX formats
    # on Blackwell and CDNA 4, NVFP4 on Blackwell only; another precision skips every run (train.plan.skip_reason)
    formats: tuple[str, ...] = ("bf16", "fp8")
    peak_source: str = ""  # the vendor document the peaks are read from

    def peak_tflops(self, precision: str) -> float | None:
        """Peak dense TFLOP/s at a run's precision (utils.spec.precision.PEAK_CLASS: MXFP8 at the FP8 rate, MXFP4 and
        NVFP4 at the FP4 rate); None where the device has none (and for fp32, the CPU's)."""
        if precision not in PEAK_CLASS:
            raise ValueError(f"unknown precision {precision!r}; one of {', '.join(PEAK_CLASS)}")
        return self.peaks().get(PEAK_CLASS[precision] or "")

    def peaks(self) -> dict[str, float]:
        """Its dense peaks by class (bf16, fp8, fp6, fp4), those it has."""
        found = {"bf16": self.bf16_tflops, "fp8": self.fp8_tflops, "fp6": self.fp6_tflops, "fp4": self.fp4_tflops}
        return {key: value for key, value in found.items() if value}


# Memory as the device reports it (nvidia-smi memory.total, amd-smi VRAM total, torch's total_memory), in GiB, and
# the GPU-to-GPU bandwidth inside a node per direction over all of a GPU's links (data sheets). These are a plan's
# ceiling and its time bound's link, not measurements:
# - H100 SXM 80GB: 81559 MiB = 79.6 GiB; NVLink 4, 18 links, 900 GB/s bidirectional = 450 GB/s per direction.
# - H100 NVL 94GB: 95830 MiB = 93.6 GiB; NVLink bridge to its pair, 600 GB/s bidirectional = 300 per direction.
# - H100 PCIe 80GB: 81559 MiB = 79.6 GiB; PCIe Gen5 x16, 64 GB/s per direction.
# - H200 141GB: 143771 MiB = 140.4 GiB; NVLink 4 as the H100 SXM, 450 GB/s per direction.
# - B200 180GB: 183359 MiB = 179.1 GiB; NVLink 5, 1.8 TB/s bidirectional = 900 GB/s per direction.
# - MI300X 192GB: 196592 MiB = 192.0 GiB; Infinity Fabric, 7 links x 64 GB/s = 448 GB/s per direction.
# - MI325X 256GB: 262128 MiB = 256.0 GiB; Infinity Fabric as the MI300X, 448 GB/s per direction.
# - MI355X 288GB: 294896 MiB = 288.0 GiB; Infinity Fabric, 7 links x 76.8 GB/s = 537.6 GB/s per direction.
LINKS: dict[str, dict[str, float]] = {
    "h100": {"memory_gib": 79.6, "intra_gb_s": 450.0}, "h100nvl": {"memory_gib": 93.6, "intra_gb_s": 300.0},
    "h100pcie": {"memory_gib": 79.6, "intra_gb_s": 64.0}, "h200": {"memory_gib": 140.4, "intra_gb_s": 450.0},
    "b200": {"memory_gib": 179.1, "intra_gb_s": 900.0}, "mi300x": {"memory_gib": 192.0, "intra_gb_s": 448.0},
    "mi325x": {"memory_gib": 256.0, "intra_gb_s": 448.0}, "mi355x": {"memory_gib": 288.0, "intra_gb_s": 537.6},
}
# Rated device-memory bandwidth (memory_gb_s, GB/s = 1e9 bytes/s), what the acceptance stage's copy is held against
# (utils/machine/acceptance.py): H100 SXM 3.35 TB/s, H100 NVL 3.9 TB/s, H100 PCIe 2.0 TB/s
# (https://www.nvidia.com/en-us/data-center/h100/), H200 4.8 TB/s (https://www.nvidia.com/en-us/data-center/h200/),
# B200 8 TB/s per GPU (https://www.nvidia.com/en-us/data-center/hgx/), MI300X 5.3 TB/s
# (https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html), MI325X 6 TB/s
# (https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html), MI355X 8 TB/s
# (https://www.amd.com/en/products/accelerators/instinct/mi350/mi355x.html).
MEMORY_GB_S = {"h100": 3350.0, "h100nvl": 3900.0, "h100pcie": 2000.0, "h200": 4800.0, "b200": 8000.0,
               "mi300x": 5300.0, "mi325x": 6000.0, "mi355x": 8000.0}
LINKS = {key: {**links, "memory_gb_s": MEMORY_GB_S[key]} for key, links in LINKS.items()}
# Between nodes, per GPU (one adapter each): InfiniBand NDR / ConnectX-7, or AMD Pollara/RoCE at 400 Gb/s, the
# usual build of these nodes; NET_LINK_GBPS overrides it for the time bound and the projection.
INTER_NODE_GBPS = 400.0

# Maximum board power (max_power_w), the data sheets' TDP / total board power, the most a device's power sensor can
# read while it works (evaluate.validate fails a result above it): H100 SXM 700 W, H100 NVL 400 W (350-400 W
# configurable) and H100 PCIe 350 W (NVIDIA H100 product brief PB-11133), H200 SXM 700 W, B200 1000 W (HGX B200),
# MI300X 750 W, MI325X 1000 W, MI355X 1400 W (AMD Instinct data sheets; the MI350X is the 1000 W air-cooled one).
# A CPU package (RAPL, the CPU platform's sensor) has no table entry; the largest server packages are rated 500 W
# (AMD EPYC 9965, Intel Xeon 6980P) and run above it only for short turbo bursts (Intel's PL2 is 1.2x TDP), so no
# package reads more than twice that.
CPU_PACKAGE_MAX_W = 1000.0
# The idle floor (idle_power_w): below what any powered, working device of the model reads even at idle, W. The
# floors are a quarter to a half of the idle draw these boards are reported at (H100/H200 SXM about 70 W, the PCIe
# and NVL cards about 40-50 W, B200 about 130 W, MI300X/MI325X/MI355X about 90-150 W at idle), so a mean over training
# steps below one is no reading of a working board: a sensor that answered zero or a unit misread (mW as W). A CPU
# package (RAPL) never reads below a watt while the machine runs. A device the table lacks is held to the lowest
# floor of the table.
CPU_PACKAGE_MIN_W = 1.0
# The most host memory one machine holds (the largest single-system images hold 32-48 TiB): a host-memory figure
# above it is no reading, whatever the host.
HOST_MEMORY_MAX_GIB = 65536.0

# Peaks (dense, no sparsity), each entry's peak_source naming the document: NVIDIA's H100 datasheet (SXM: BF16 989.4,
# FP8 1978.9; halves of its sparse 1979/3958), the H200 datasheet (the H100 SXM's), the HGX B200 datasheet (per GPU:
# BF16 2250, FP8 and MXFP8 4500, FP4 9000; halves of its sparse figures); AMD's Instinct MI300X and MI325X datasheets
# (BF16 1307.4, FP8 2614.9: 304 CUs x 2100 MHz x 2048 and 4096 FLOP per CU and clock) and the CDNA 4 whitepaper for
# the MI355X (256 CUs x 2400 MHz: BF16 2516.6, FP8 and MXFP8 5033.2, MXFP6 and MXFP4 10066.3; the MI355X datasheet
# rounds them to 2.5, 5.0 and 10.1 PFLOP/s).
H100_SOURCE = "NVIDIA H100 Tensor Core GPU datasheet (dense = half the sparse figures)"
AMD_SOURCE = "AMD Instinct {} datasheet"
# Order matters: the first pattern that matches the upper-cased device name wins, so the specific
# variants (NVL, PCIe) come before the generic H100 SXM entry. H100 SXM reports itself as
# "NVIDIA H100 80GB HBM3"; a bare "H100" (or "H200 NVL", which has lower clocks) matches nothing.
DEVICES: tuple[tuple[str, DeviceSpec], ...] = (
    (r"\bH100\b.*\bNVL\b", DeviceSpec("NVIDIA H100 NVL", "nvidia", 835, None, **LINKS["h100nvl"], max_power_w=400,
                                       idle_power_w=20, peak_source=H100_SOURCE)),
    (r"\bH100\b.*\bPCIE\b", DeviceSpec("NVIDIA H100 PCIe", "nvidia", 756, None, **LINKS["h100pcie"], max_power_w=350,
                                        idle_power_w=20, peak_source=H100_SOURCE)),
    (r"\bH100\b.*\b(SXM\w*|HBM3)\b", DeviceSpec("NVIDIA H100 SXM", "nvidia", 989.4, 1978.9, **LINKS["h100"],
                                                 max_power_w=700, idle_power_w=30, peak_source=H100_SOURCE)),
    (r"\bH200\b(?!.*\bNVL\b)", DeviceSpec("NVIDIA H200", "nvidia", 989.4, 1978.9, **LINKS["h200"], max_power_w=700,
                                            idle_power_w=30, peak_source="NVIDIA H200 Tensor Core GPU datasheet")),
    (r"\bB200\b", DeviceSpec("NVIDIA B200", "nvidia", 2250, 4500, **LINKS["b200"], max_power_w=1000, idle_power_w=50,
                             fp4_tflops=9000, formats=("bf16", "fp8", "mxfp8", "mxfp4", "nvfp4"),
                             peak_source="NVIDIA HGX B200 datasheet, per GPU (dense = half the sparse figures)")),
    (r"\bMI300X\b", DeviceSpec("AMD MI300X", "amd", 1307.4, 2614.9, **LINKS["mi300x"], max_power_w=750,
                               idle_power_w=40, peak_source=AMD_SOURCE.format("MI300X"))),
    (r"\bMI325X\b", DeviceSpec("AMD MI325X", "amd", 1307.4, 2614.9, **LINKS["mi325x"], max_power_w=1000,
                               idle_power_w=40, peak_source=AMD_SOURCE.format("MI325X"))),
    (r"\bMI355X\b", DeviceSpec("AMD MI355X", "amd", 2516.6, 5033.2, **LINKS["mi355x"], max_power_w=1400,
                               idle_power_w=50, fp6_tflops=10066.3, fp4_tflops=10066.3,
                               formats=("bf16", "fp8", "mxfp8", "mxfp4"),
                               peak_source="AMD CDNA 4 architecture whitepaper (MI355X); AMD Instinct MI355X datasheet")),
)


# Planning targets (TARGET_DEVICE): a short key for each device of the table, as that device names itself, so a
# login node without GPUs can plan for one (memory, time bound) through the same lookup as a detected GPU.
TARGET_DEVICES: dict[str, str] = {
    "h100": "NVIDIA H100 80GB HBM3",
    "h200": "NVIDIA H200",
    "b200": "NVIDIA B200",
    "mi300x": "AMD Instinct MI300X",
    "mi325x": "AMD Instinct MI325X",
    "mi355x": "AMD Instinct MI355X",
}


def find_device(device_name: str | None) -> DeviceSpec | None:
    """The table entry for a reported device name, or None, quietly: for readers to whom an unknown device is no
    problem (it simply has no peak, power bounds or capacity of its own)."""
    upper = (device_name or "").upper()
    return next((spec for pattern, spec in DEVICES if upper and re.search(pattern, upper)), None)


def lookup_device(device_name: str | None) -> DeviceSpec | None:
    """The table entry for a reported device name, or None (with a warning) when none matches."""
    if not device_name:
        warnings.warn("no device name: peak TFLOP/s unknown, MFU left empty", stacklevel=2)
        return None
    spec = find_device(device_name)
    if spec is None:
        warnings.warn(f"device {device_name!r} is not in the peak TFLOP/s table (utils/machine/hardware.py): "
                      "MFU left empty", stacklevel=2)
    return spec


def peak_tflops(device_name: str | None, precision: str) -> float | None:
    """Peak dense TFLOP/s of a device at a precision, or None when unknown (warned)."""
    spec = lookup_device(device_name)
    if spec is None:
        return None
    peak = spec.peak_tflops(precision)
    if peak is None:
        warnings.warn(f"{spec.name} has no {precision.upper()} peak in the table: MFU left empty", stacklevel=2)
    return peak


def lacks(spec: DeviceSpec | None, precision: str) -> str:
    """Why a device cannot train in a precision (one phrase naming the devices that can), or "" when it can or is
    unknown (an unknown device is not refused on a guess)."""
    if spec is None or precision not in PEAK_CLASS or PEAK_CLASS[precision] is None or precision in spec.formats:
        return ""
    having = ", ".join(dict.fromkeys(entry.name for _, entry in DEVICES if precision in entry.formats))
    return f"{spec.name} has no {precision.upper()} matrix units ({having} have them)"


def cpu_flags(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The CPU's feature flags (x86 "flags", Arm "Features"); TPRIMAT_CPUINFO names another cpuinfo (tests)."""
    environ = os.environ if environ is None else environ
    try:
        text = Path(environ.get("TPRIMAT_CPUINFO") or CPUINFO).read_text(errors="replace")
    except OSError:
        return frozenset()
    flags: set[str] = set()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in ("flags", "features"):
            flags.update(value.split())
    return frozenset(flags)


def cpu_native_bf16(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this CPU has bf16 instructions (AVX-512 BF16, AMX or Arm BF16)."""
    return bool(NATIVE_BF16_FLAGS & cpu_flags(environ))


def cpu_precision(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The fastest correct training precision on this CPU, and why (one phrase)."""
    found = sorted(NATIVE_BF16_FLAGS & cpu_flags(environ))
    if found:
        return "bf16", f"this CPU has bf16 instructions: {', '.join(found)}"
    return "fp32", "this CPU has no bf16 instructions (AVX-512 BF16, AMX, Arm BF16): bf16 would be emulated, tens of times slower"
