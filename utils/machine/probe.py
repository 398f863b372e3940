"""Describe the machine a benchmark runs on: system.json (MLPerf-style system description).

    python3 -m evaluate.probe -o system.json     # or without -o: print it

Accelerators from nvidia-smi, rocm-smi or amd-smi (whichever answers; utils.machine.vendor_tools runs and reads them,
as for node health's and telemetry's fallbacks), else from torch when it sees a device; software versions from the
installed distributions (torch imported only where a GPU's device files are); host facts from /proc, /etc and /sys.
Whatever cannot be read stays null: on a CPU-only machine the GPU fields are empty, never invented.

Nodes: the node count (NNODES) and the nodes' names in node-rank order, from the Slurm allocation (RUN_SET_DIR/
slurm.json written by the job, else SLURM_JOB_NODELIST expanded by scontrol), else this host alone on one node; empty
for a multi-node run started by hand (each node's launch.json names its host). Interconnect: the InfiniBand/RoCE
adapters /sys shows, else the network interfaces; empty where /sys cannot be read.

    python3 -m evaluate.probe --require-stack amd --frameworks mega,prim [--python PATH]

checks, before a GPU run, that the Python which would train (PATH, default this one) sees the vendor's GPUs through its
torch and has what each framework imports; otherwise it names what is missing and the two ways out in one line, exit 2.
A CPU build of torch on a GPU node would otherwise train there, on the CPU, a run labelled amd or nvd.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

from utils import ROOT
from utils.cli import Parser, output_file
from utils.files import atomic_open
from utils.frameworks import TABLE, resolve
from utils.spec.fairness import TRANSFORMER_IMPLS
from utils.machine.vendor_tools import amd_gpus, empty_gpu, number_in, nvidia_gpus, read_text, run_tool

PROBE_VERSION = 2  # 2: node_names; interconnect with link layers and interfaces
GPU_DEVICE_FILES = ("/dev/nvidia[0-9]*", "/dev/kfd")  # what NVIDIA's and AMD's kernel drivers expose per node
DISTRIBUTIONS = {"torch": ("torch",), "megatron_core": ("megatron-core", "megatron_core"),
                 "transformer_engine": ("transformer-engine", "transformer_engine", "transformer_engine_torch"),
                 "nemo": ("nemo-toolkit", "nemo_toolkit"), "primus": ("primus",), "primus_turbo": ("primus-turbo",),
                 "megatron_bridge": ("megatron-bridge", "megatron_bridge"), "torchtitan": ("torchtitan",), "numpy": ("numpy",)}


def gpu_device_files() -> bool:
    """A GPU's device files are there (in a container as on its host): without them no torch sees a GPU, so none is
    imported to ask (importing torch was 1.5 s of every probe on a CPU machine, and one runs before every run set)."""
    return any(glob.glob(pattern) for pattern in GPU_DEVICE_FILES)


def torch_gpus() -> dict | None:
    """torch's view, for machines where the vendor tool is absent but a device is visible."""
    if importlib.util.find_spec("torch") is None or not gpu_device_files():
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    devices = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        devices.append({"index": index, "name": props.name, "memory_gib": round(props.total_memory / 2 ** 30, 2)})
    vendor = "amd" if torch.version.hip else "nvidia"
    return {**empty_gpu(), "vendor": vendor, "name": devices[0]["name"], "count": len(devices),
            "memory_gib": devices[0]["memory_gib"], "cuda": torch.version.cuda, "rocm": torch.version.hip,
            "devices": devices}


def gpu_info() -> dict:
    """What the vendor's tool says, else what torch sees, else no GPU."""
    return nvidia_gpus() or amd_gpus() or torch_gpus() or empty_gpu()


def _distribution_version(names: tuple[str, ...]) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _package_file(package: str, *path: str) -> str:
    """A file of the package that `import package` finds first, read without importing it ("" where none)."""
    spec = importlib.util.find_spec(package)
    for location in (spec.submodule_search_locations or []) if spec else []:
        if text := read_text(os.path.join(location, *path)):
            return text
    return ""


def _megatron_imported() -> str | None:
    """The version of the megatron-core that `import megatron.core` finds first, from its package_info.py
    (wheels and source checkouts both ship it, pre-release tag included: Primus pins 0.15.0rc8), so that a
    checkout on PYTHONPATH in front of an installed wheel is reported as what really runs."""
    text = _package_file("megatron", "core", "package_info.py")
    parts = [re.search(rf"^{k}\s*=\s*(\d+)", text, re.MULTILINE) for k in ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        return None
    pre = re.search(r"^PRE_RELEASE\s*=\s*['\"]([^'\"]*)['\"]", text, re.MULTILINE)
    return ".".join(p.group(1) for p in parts) + (pre.group(1) if pre else "")


def torch_build() -> tuple[str | None, str | None]:
    """The CUDA and HIP versions torch was built for, from the torch/version.py its build generated, read rather
    than imported, as megatron-core's package_info.py is."""
    text = _package_file("torch", "version.py")
    found = [re.search(rf"^{key}\b[^=\n]*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE) for key in ("cuda", "hip")]
    return found[0] and found[0].group(1), found[1] and found[1].group(1)


def software_info() -> dict:
    """Python, framework and communication library versions (null where not installed, and NCCL's and RCCL's where
    no GPU is there to use them: only an imported torch says which it loads)."""
    info = {key: _distribution_version(names) for key, names in DISTRIBUTIONS.items()}
    info["megatron_core"] = _megatron_imported() or info["megatron_core"]
    info["python"] = platform.python_version()
    info["torch_cuda"], info["torch_hip"] = torch_build() if info["torch"] else (None, None)
    info.update(nccl=None, rccl=None)
    if (info["torch_cuda"] or info["torch_hip"]) and gpu_device_files():
        import torch

        if torch.version.cuda or torch.version.hip:
            try:
                version = ".".join(map(str, torch.cuda.nccl.version()))
                info["rccl" if torch.version.hip else "nccl"] = version
            except (RuntimeError, AttributeError, TypeError):
                pass
    return info


def host_info() -> dict:
    cpuinfo = read_text("/proc/cpuinfo") or ""
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    meminfo = read_text("/proc/meminfo") or ""
    memory_kib = re.search(r"^MemTotal:\s*(\d+)", meminfo, re.MULTILINE)
    os_release = read_text("/etc/os-release") or ""
    pretty = re.search(r'^PRETTY_NAME="?([^"\n]+)"?', os_release, re.MULTILINE)
    physical = None
    if importlib.util.find_spec("psutil") is not None:
        import psutil

        physical = psutil.cpu_count(logical=False)
    return {"hostname": socket.gethostname(), "cpu_model": model.group(1).strip() if model else platform.processor() or None,
            "cpu_cores": physical, "cpu_threads": os.cpu_count(),
            "memory_gib": round(int(memory_kib.group(1)) / 2 ** 20, 1) if memory_kib else None,
            "os": pretty.group(1) if pretty else platform.system(), "kernel": platform.release(),
            "architecture": platform.machine()}


def _rdma_adapter(device: Path) -> dict:
    """One InfiniBand/RoCE adapter: its ports' rates and link layers (InfiniBand, or Ethernet for RoCE)."""
    ports = sorted(device.glob("ports/*"))
    values = {key: sorted({(read_text(str(port / key)) or "").strip() for port in ports} - {""})
              for key in ("rate", "link_layer")}
    return {"device": device.name, "rates": values["rate"], "link_layers": values["link_layer"]}


def _interface(path: Path) -> dict:
    speed = number_in(read_text(str(path / "speed")))  # Mb/s; -1 or unreadable when the link is down or virtual
    return {"name": path.name, "state": (read_text(str(path / "operstate")) or "").strip() or None,
            "speed_mbps": int(speed) if speed and speed > 0 else None, "physical": (path / "device").exists()}


def _children(root: Path) -> list[Path]:
    try:
        return sorted(root.iterdir())
    except OSError:
        return []


def interconnect_info(ib_root: Path = Path("/sys/class/infiniband"), net_root: Path = Path("/sys/class/net")) -> dict:
    """What the nodes can talk over: the InfiniBand/RoCE adapters, else the network interfaces (the physical ones when
    there are any, else every one but loopback, as a container sees them)."""
    adapters = [_rdma_adapter(device) for device in _children(ib_root)]
    interfaces: list[dict] = []
    if not adapters:
        interfaces = [_interface(path) for path in _children(net_root) if path.name != "lo"]
        physical = [i for i in interfaces if i["physical"]]
        interfaces = physical or interfaces
    return {"infiniband": adapters, "interfaces": interfaces}


def _nodes_of_slurm_json(run_set: str | None) -> list[str] | None:
    if not run_set:
        return None
    try:
        nodes = json.loads((Path(run_set) / "slurm.json").read_text()).get("nodes")
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    return nodes if isinstance(nodes, list) and nodes and all(isinstance(n, str) for n in nodes) else None


def node_names(env: Mapping[str, str], nnodes: int | None) -> list[str]:
    """The run set's nodes in node-rank order: Slurm's allocation, else this host for one node; [] unknown. The job's
    node list counts only when it has as many nodes as the run (a one-node run in a larger allocation ran here alone)."""
    recorded = _nodes_of_slurm_json(env.get("RUN_SET_DIR"))
    if recorded:
        return recorded
    nodelist = env.get("SLURM_JOB_NODELIST")
    if nodelist:
        expanded = (run_tool("scontrol", "show", "hostnames", nodelist) or "").split()
        if expanded and len(expanded) == (nnodes or len(expanded)):
            return expanded
    return [socket.gethostname()] if nnodes in (None, 1) else []


def probe(env: Mapping[str, str] | None = None) -> dict:
    """The whole system description."""
    env = os.environ if env is None else env
    count = env.get("NNODES")
    nodes = int(count) if count and count.isdigit() else None
    return {"probe_version": PROBE_VERSION, "collected_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "nodes": nodes, "node_names": node_names(env, nodes), "gpu": gpu_info(), "host": host_info(),
            "software": software_info(), "interconnect": interconnect_info()}


# --- The GPU stack a training Python must have ----------------------------------------------------

VENDOR_STACK = {"amd": ("hip", "ROCm", "AMD"), "nvd": ("cuda", "CUDA", "NVIDIA")}  # torch.version.<attr>, names
FRAMEWORK_MODULES = {name: entry.probe_modules for name, entry in TABLE.items()}  # each beyond torch
NOT_INSTALLED = "not installed"  # a module's import problem when neither it nor a package above it is there
IMPORTS_TIMEOUT_S = 300  # importing every framework's modules (NeMo's take longest) in a fresh process


def import_problem(name: str) -> str:
    """Why a module does not import in this Python ("" when it does). It is imported, not only found: a framework
    installed over a torch too old for it (torchtitan 0.3 on torch 2.12) is found and then fails at its first
    import, and the run would fail there instead of being skipped."""
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name and (name == err.name or name.startswith(err.name + ".")):
            return NOT_INSTALLED
        return f"ModuleNotFoundError: {err}"
    except Exception as err:  # anything an import raises is the answer, named in one line
        message = str(err).splitlines()[0][:200] if str(err) else ""
        return f"{type(err).__name__}: {message}" if message else type(err).__name__
    return ""


def stack_facts(frameworks: list[str]) -> dict:
    """What this Python sees: its torch build and GPUs, and for each module of the frameworks the import's problem
    ("" when it imports)."""
    problems: dict[str, str] = {}
    for framework in frameworks:  # each module imported as the first framework naming it imports it
        context = TABLE[framework].probe_context
        for name in FRAMEWORK_MODULES[framework]:
            if name not in problems:
                with resolve(context)() if context else contextlib.nullcontext():
                    problems[name] = import_problem(name)
    facts: dict = {"torch": None, "hip": None, "cuda": None, "gpus": 0, "modules": dict(sorted(problems.items()))}
    if importlib.util.find_spec("torch") is not None:
        import torch

        facts.update(torch=torch.__version__, hip=torch.version.hip, cuda=torch.version.cuda,
                     gpus=torch.cuda.device_count())
    return facts


def facts_of(python: str, frameworks: list[str]) -> dict | None:
    """stack_facts() as the Python `python` sees them, asked in a process of its own (so that the caller never
    initialises a GPU runtime); None when it does not answer."""
    try:
        answer = subprocess.run([python, "-m", "evaluate.probe", "--stack-facts", "--frameworks", ",".join(frameworks)],
                                cwd=ROOT, capture_output=True, text=True, timeout=IMPORTS_TIMEOUT_S)
        return json.loads(answer.stdout) if answer.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
        return None


def import_refusals(frameworks: list[str], python: str) -> dict[str, str]:
    """Each framework whose modules are installed in `python` but do not import there, with the import's error:
    the plan skips its runs with that reason (a framework pinned above the image's torch, a broken dependency)
    instead of starting runs that fail at their first import. A module not reported is not judged here: the
    stack check (stack_problem) names what is missing, and an image that lacks one fails the run at its import."""
    facts = facts_of(python, frameworks)
    if facts is None:
        return {}
    refusals = {}
    for name in frameworks:
        failed = [f"{module}: {facts['modules'][module]}" for module in FRAMEWORK_MODULES[name]
                  if facts["modules"].get(module) not in (None, "", NOT_INSTALLED)]
        if failed:
            why = TABLE[name].torch_refusal(facts.get("torch"))
            refusals[name] = (f"{name} does not import in {python} (torch {facts.get('torch')}): {'; '.join(failed)}"
                              + (f"; {why}" if why else ""))
    return refusals


def required_modules(frameworks: list[str], transformer_impl: str = "transformer_engine") -> list[str]:
    """The modules the frameworks' trainers import beyond torch; with TRANSFORMER_IMPL=local, Transformer Engine is
    not among them for a framework that builds megatron-core's own layers (its entry's transformer_impls)."""
    local = transformer_impl == "local"
    return list(dict.fromkeys(name for framework in frameworks for name in FRAMEWORK_MODULES[framework]
                              if not (local and name == "transformer_engine"
                                      and "local" in TABLE[framework].transformer_impls)))


def stack_problem(platform: str, frameworks: list[str], python: str,
                  transformer_impl: str = "transformer_engine") -> str | None:
    """One line naming what the Python `python` lacks to train the frameworks on the platform's GPUs,
    and the two ways out; None when it has everything. Asked in a process of its own, so that the
    caller never initialises a GPU runtime."""
    attribute, build, vendor = VENDOR_STACK[platform]
    missing: list[str] = []
    facts = facts_of(python, frameworks)
    if facts is None:
        missing.append(f"no working Python at {python}")
    else:
        if facts["torch"] is None:
            missing.append("no torch")
        elif not facts[attribute]:
            missing.append(f"torch {facts['torch']} is not a {build} build")
        elif not facts["gpus"]:
            missing.append(f"torch {facts['torch']} sees no {vendor} GPU")
        for name in required_modules(frameworks, transformer_impl):
            problem = facts["modules"].get(name)
            if problem in (None, NOT_INSTALLED):
                missing.append(f"no {name}")
            elif problem:
                missing.append(f"{name} does not import ({problem})")
    checks = [TABLE[name].stack_check for name in frameworks if TABLE[name].stack_check]
    if checks:  # what a framework asks of the stack beyond the modules its image imports (its entry's stack_check)
        from utils.spec import stacks

        stack = stacks.get(os.environ["STACK"]) if os.environ.get("STACK") in stacks.TABLE else \
            stacks.default(platform)
        for check in checks:
            problem = resolve(check)(stack)
            missing += [problem] if problem else []
    if not missing:
        return None
    return (f"{python} cannot train {','.join(frameworks)} on {vendor} GPUs: {', '.join(missing)}; run in the "
            f"container (./shell/build.sh, then ./shell/run_train.sh with a Docker engine answering, or "
            f"RUNTIME=docker; Slurm: SLURM_CONTAINER=pyxis) or set TPRIMAT_PYTHON to a Python environment with "
            f"the {build} stack")


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m evaluate.probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", type=output_file, help="system.json to write (default: print)")
    parser.add_argument("--require-stack", choices=sorted(VENDOR_STACK), metavar="PLATFORM",
                        help="amd or nvd: exit 2 with one line unless --python can train --frameworks there")
    parser.add_argument("--frameworks", default="", help="comma list of frameworks (utils.frameworks; with --require-stack or --stack-facts)")
    parser.add_argument("--python", default=sys.executable, help="the Python that would train (default: this one)")
    parser.add_argument("--transformer-impl", choices=TRANSFORMER_IMPLS, default=TRANSFORMER_IMPLS[0],
                        help="TRANSFORMER_IMPL (with --require-stack): local needs no Transformer Engine for mega, mbridge")
    parser.add_argument("--stack-facts", action="store_true", help="print what this Python sees of --frameworks' modules, as JSON")
    args = parser.parse_args(argv)
    if args.stack_facts or args.require_stack:
        frameworks = [name for name in args.frameworks.split(",") if name]
        unknown = [name for name in frameworks if name not in FRAMEWORK_MODULES]
        if unknown or not frameworks:
            print(f"evaluate.probe: --frameworks {args.frameworks!r}: give a comma list of "
                  f"{', '.join(FRAMEWORK_MODULES)}", file=sys.stderr)
            return 2
    if args.stack_facts:
        with contextlib.redirect_stdout(sys.stderr):  # what an import prints must not break the JSON line
            facts = stack_facts(frameworks)
        print(json.dumps(facts))
        return 0
    if args.require_stack:
        problem = stack_problem(args.require_stack, frameworks, args.python, args.transformer_impl)
        if problem:
            print(f"[tprimat] error: PLATFORM={args.require_stack}: {problem}", file=sys.stderr)
            return 2
        return 0
    text = json.dumps(probe(), indent=2) + "\n"
    if args.output is None:
        sys.stdout.write(text)
        return 0
    with atomic_open(args.output, encoding="utf-8") as out:
        out.write(text)
    print(f"{args.output}: {system_line(json.loads(text))}")
    return 0


def system_line(system: dict) -> str:
    """One line: "8 x NVIDIA H100 80GB HBM3, driver 550.54.15, CUDA 12.8" or "no GPU (CPU only)"."""
    gpu = system.get("gpu") or {}
    if not gpu.get("count"):
        host = system.get("host") or {}
        return f"no GPU (CPU only: {host.get('cpu_model') or 'unknown CPU'}, {host.get('cpu_threads') or '?'} threads)"
    extras = [f"driver {gpu['driver']}" if gpu.get("driver") else "", f"CUDA {gpu['cuda']}" if gpu.get("cuda") else "",
              f"ROCm {gpu['rocm']}" if gpu.get("rocm") else ""]
    return ", ".join([f"{gpu['count']} x {gpu.get('name') or 'unknown GPU'}"] + [e for e in extras if e])


if __name__ == "__main__":
    sys.exit(main())
