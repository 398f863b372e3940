"""The stack table: each software stack TPrimat runs on is one row, and STACK chooses a row per platform.

A stack is what a vendor ships in one image (its ROCm or CUDA, torch, Transformer Engine, megatron-core and its
own framework: Primus, NeMo or Megatron-Bridge), plus the frameworks TPrimat runs on it. The image is the base that
<platform>.Dockerfile builds FROM (shell/lib/docker.sh passes it as `BASE_IMAGE`, which has no default); the result
records the stack's name and the image's digest, so two runs of one vendor on two stacks compare like two vendors
do. A platform's rows run newest first; its default is its newest row that is checked (CI installs and checks the
framework versions it carries). The other rows stay selectable: the older ones so that a stack upgrade is measured
against the last one, a newer one not checked here (its frameworks not yet on the index CI reaches) so that it can
be tried before it becomes the default; the printed table marks it.
The CPU's stack is the host's .venv (requirements/host.txt), not an image.

A version is written as the stack's public source states it; None where no public source states it (the probe
records what the image really holds, in every result's system.software). `frameworks` may name a framework the
registry (utils/frameworks/) does not have yet: whoever uses the list filters it to registered names
(utils.config.selection.stack_frameworks), so a row can be written before its framework's entry lands.

Adding a stack is one row here and no edit elsewhere, a new newest checked row (the new default) included: the
Dockerfiles, the docs and the tests read the table (docs/ARCHITECTURE.md, "Where new things go";
tests/test_utils_stacks_new_row.py adds such a row per GPU platform to a copy and runs the tests that read them).
Standard library only: utils.config reads it before any environment exists. `python3 -m utils.spec.stacks markdown`
prints the table (docs/frameworks.md keeps no copy).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

DIGEST_ENV = "TPRIMAT_IMAGE_DIGEST"  # the base image's registry digest, passed into the container by shell/lib/docker.sh
NO_DIGEST = "unknown"  # what shell/lib/docker.sh passes when the pulled base image has no registry digest


@dataclass(frozen=True)
class Stack:
    name: str  # STACK's value, e.g. "primus-v26.5"
    platform: str  # amd | nvd | cpu
    image: str | None  # the base image <platform>.Dockerfile builds FROM; None: the host's .venv (CPU)
    released: str  # the image's date, YYYY-MM (or the host pins' date)
    runtime: str | None  # the accelerator runtime it carries, e.g. "ROCm 7.15.0"; "" on the CPU; None: not published
    torch: str | None
    transformer_engine: str | None  # "" where it carries none; None: not published
    megatron_core: str  # as its Megatron code reports it (a Megatron-LM checkout's own version on Primus)
    frameworks: tuple[str, ...]  # the utils.frameworks entries that run on it, in the run list's order
    primus: str | None = None  # the Primus release in the image (AMD); it decides how prim launches
    nemo: str | None = None  # NeMo's version in the image (NVIDIA's NeMo 2 recipes)
    megatron_bridge: str | None = None  # Megatron-Bridge's version in the image
    collectives: str | None = None  # its RCCL or NCCL; None: not published
    python: str | None = None  # the image's Python; None: not published
    source: str = ""  # where these facts were read (repository, path, tag or commit, or URL)
    # Whether CI installs and checks the framework versions the row carries; a row that is not is selectable by STACK
    # but never a platform's default, and the printed table says "not checked here".
    checked: bool = True
    # The vendor's run environment where it differs between stacks (every framework on the stack gets it, over
    # utils/machine/platform_env's platform-wide values; an exported value wins); `env_source` says where it is read.
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    env_source: str = ""


ROWS = (
    # Not checked here: no v26.8 release in train/prim/releases.py (nor its checkout in utils/frameworks/prim/
    # checkout.py), so prim cannot launch it and is not listed. No torchtitan either: TPrimat's pinned 0.3.0 is
    # unchecked on torch 2.14, and torchtitan 0.4.0 needs torch 2.15.
    Stack(name="primus-v26.8", platform="amd", image="rocm/primus:v26.8", released="2026-10",
          runtime="ROCm 10.1.0", torch="2.14.0+rocm10.1.0", transformer_engine="2.17.1+130099ce4",
          megatron_core="0.16.0rc0 (Megatron-LM d3528a21)", frameworks=("mega", "fsdp", "autotp"),
          primus="v26.8", megatron_bridge="0.3.0rc0 (9577b128)", collectives="RCCL 2.30.7", python="3.12.3",
          checked=False,
          source="AMD-AGI/Primus docs/01-getting-started/release-notes.md, the version whose current section is v26.8 "
                 "(public code index, commit not named there), section rocm/primus:v26.8: built 2026-10-08, ROCm "
                 "10.1.0, Python 3.12.3, PyTorch 2.14.0+rocm10.1.0, Transformer Engine 2.17.1+130099ce4, RCCL 2.30.7; "
                 "its 'Primus source for v26.8': built from release/v26.8 tip f487a934, Megatron-LM d3528a21 "
                 "(NVIDIA/Megatron-LM megatron/core/package_info.py: 0.16.0rc0), Megatron Bridge 9577b128 "
                 "(NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/package_info.py: 0.3.0rc0); "
                 ".github/workflows/docker-release/Dockerfile.primus-v26.8 (2d59b2d9): THE_ROCK_VERSION 10.1.0, "
                 "PYTORCH_VERSION 2.14.0+rocm10.1.0, TE from ROCm/TransformerEngine 130099ce; "
                 "rocm.docs.amd.com/projects/primus/en/v26.9 megatron-lm-training.md names it the image before "
                 "rocm/primus:v26.9, whose versions no public source found states"),
    Stack(name="primus-v26.5", platform="amd", image="rocm/primus:v26.5", released="2026-07",
          runtime="ROCm 7.15.0", torch="2.12.0", transformer_engine="2.15.0.dev0",
          megatron_core="0.16.0rc0 (Megatron-LM d3528a21)",
          # no torchtitan: its pinned 0.3.0 needs a newer torch (utils/frameworks/torchtitan/, torch_floor); the
          # image's own torchtitan (Primus's backend, v0.2.2) is Primus's, not TPrimat's
          frameworks=("mega", "prim", "fsdp", "autotp"), primus="v26.5",
          megatron_bridge="0.3.0rc0 (9577b128)", collectives="RCCL 2.30.4", python="3.12.3",
          source="AMD-AGI/Primus docs/01-getting-started/release-notes.md (branch dev/doc-update-v26.5 65533bba and "
                 "main fd1eeabb), section rocm/primus:v26.5: built 2026-07-22 from b511d1b6 (tag v26.5.0); "
                 "release/v26.5 third_party/Megatron-LM d3528a21 (NVIDIA/Megatron-LM megatron/core/package_info.py: "
                 "0.16.0rc0), third_party/Megatron-Bridge 9577b128 (NVIDIA-NeMo/Megatron-Bridge "
                 "src/megatron/bridge/package_info.py: 0.3.0rc0)",
          # Scratch memory kept, the CK attention backward v3 kernel with fp32 atomics: without them that kernel
          # gives Inf gradients on MI300X/MI325X (gfx942) at the first step; MI355X (gfx950) may export
          # NVTE_CK_IS_V3_ATOMIC_FP32=0, as the image ships it.
          env=MappingProxyType({"HSA_NO_SCRATCH_RECLAIM": "1", "NVTE_CK_USES_BWD_V3": "1",
                                "NVTE_CK_IS_V3_ATOMIC_FP32": "1"}),
          env_source="AMD-AGI/Primus release/v26.5 ca7ddda3 runner/helpers/envs/base_env.sh:200,240 (both 1; "
                     "utils/upstream/table.py); "
                     "main fd1eeabb docs/02-user-guide/megatron-lm-training.md 'Important notes for v26.5' (gfx942: "
                     "HSA_NO_SCRATCH_RECLAIM=1, NVTE_CK_IS_V3_ATOMIC_FP32=1) and docs/01-getting-started/"
                     "bare-metal-installation.md 1.6 (Inf gradients without fp32 atomics)"),
    Stack(name="primus-v25.11", platform="amd", image="rocm/primus:v25.11", released="2025-11",
          runtime="ROCm 7.1", torch="2.10", transformer_engine=None, megatron_core="0.15.0rc8 (Megatron-LM 84778176)",
          frameworks=("mega", "prim", "fsdp", "autotp"), primus="v25.11", collectives="RCCL 2.27",
          source="AMD-AGI/Primus branch clairlee/release/v25.11 (66bed3ce) third_party/Megatron-LM 84778176 "
                 "(NVIDIA/Megatron-LM megatron/core/package_info.py: 0.15.0rc8); ROCm, torch and RCCL as TPrimat's "
                 "runs of the image read them (reference/frameworks.md); Primus publishes no manifest for v25.11 "
                 "(its release notes start at v26.1), so Transformer Engine's version is not published",
          # Scratch memory reclaimed, the CK attention backward v3 kernel off ("accuracy issues", until TE 2.1).
          env=MappingProxyType({"HSA_NO_SCRATCH_RECLAIM": "0", "NVTE_CK_USES_BWD_V3": "0"}),
          env_source="AMD-AGI/Primus clairlee/release/v25.11 66bed3ce examples/run_pretrain.sh:223,318 "
                     "(utils/upstream/table.py)"),
    Stack(name="nemo-26.08", platform="nvd", image="nvcr.io/nvidia/nemo:26.08", released="2026-08",
          runtime=None, torch=None, transformer_engine="2.17.1 (4329ff84)",
          megatron_core="0.19.0 (Megatron-LM cd4afffa)",
          frameworks=("mega", "mbridge", "fsdp", "autotp", "torchtitan"), megatron_bridge="0.6.0", python="3.12",
          source="NVIDIA-NeMo/Megatron-Bridge tag v0.6.0: docs/versions1.json names 0.6.0 '26.08', "
                 "docs/performance-summary.md '26.08 NeMo Container', examples/model_verification_cards/"
                 "nemotron-3.5-lightning/card.yaml base_container nvcr.io/nvidia/nemo:26.08 ('public 26.08 base "
                 "container'); the newest public NeMo tag found, after 26.04.01 (DGX Cloud benchmarking v26.06.01) "
                 "and 26.06.01 (Megatron-Bridge 0.5.1); 3rdparty/Megatron-LM cd4afffa (package_info 0.19.0); uv.lock "
                 "transformer-engine 2.17.1+4329ff84; pyproject requires-python 3.12; CUDA and torch of the image "
                 "are not published in the repository",
          # The process environment Megatron-Bridge's recipes carry (cfg.env_vars) for every framework on the stack,
          # not only inside mbridge's process: the expandable caching allocator, no NVLink SHARP and no NCCL graph
          # registration, collectives on high-priority streams without record_stream; mbridge clears the recipe's copy
          # (train/mbridge/recipe.py), so one list applies, and results record it.
          env=MappingProxyType({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "NCCL_NVLS_ENABLE": "0",
                                "NCCL_GRAPH_REGISTER": "0", "TORCH_NCCL_AVOID_RECORD_STREAMS": "1",
                                "TORCH_NCCL_HIGH_PRIORITY": "1"}),
          env_source="megatron-bridge 0.6.2 megatron/bridge/recipes/utils/environment_utils.py:22-33 "
                     "(COMMON_RECIPE_ENV_VARS; utils/upstream/table.py fact mbridge-common-recipe-env-vars), which every "
                     "recipe TPrimat runs sets as cfg.env_vars"),
    Stack(name="nemo-25.04", platform="nvd", image="nvcr.io/nvidia/nemo:25.04", released="2025-04",
          runtime=None, torch=None, transformer_engine=None, megatron_core="0.12",
          frameworks=("mega", "nemo", "fsdp", "autotp"), nemo="2.3",
          source="TPrimat's runs of the image (reference/frameworks.md: NeMo 2.3.x, megatron-core 0.12.x); NVIDIA's "
                 "software component versions page for 25.04 was not found in a public copy, so CUDA, torch and "
                 "Transformer Engine are not published here"),
    Stack(name="host", platform="cpu", image=None, released="2026-11", runtime="", torch="2.15.0",
          transformer_engine="", megatron_core="0.19.2", frameworks=("mega", "fsdp", "autotp"), collectives="",
          source="requirements/host.txt"),
)

TABLE: Mapping[str, Stack] = MappingProxyType({row.name: row for row in ROWS})
NAMES = tuple(TABLE)


def of(platform: str) -> tuple[Stack, ...]:
    """A platform's stacks, newest first."""
    return tuple(row for row in ROWS if row.platform == platform)


def default(platform: str) -> Stack:
    """A platform's newest checked stack: what STACK left empty runs on."""
    return next(row for row in of(platform) if row.checked)


def get(name: str) -> Stack:
    return TABLE[name]


def having(framework: str, platform: str) -> Stack | None:
    """The newest stack of a platform that runs a framework, a checked one first, or None: what a skip line tells the
    user to choose."""
    return next((row for row in sorted(of(platform), key=lambda row: not row.checked) if framework in row.frameworks),
                None)


# Why a run has no image digest when it ran outside any image: on a GPU platform it then ran on TPRIMAT_PYTHON's
# packages, not on its stack row's image (Request.result_stack records the stack as "host").
HOST_RUNTIME = "no image: the run ran on the host runtime"


def image_digest(env: Mapping[str, str]) -> tuple[str | None, str]:
    """The run's base-image digest as shell/lib/docker.sh passed it, or None with why there is none."""
    value = env.get(DIGEST_ENV, "").strip()
    if value and value != NO_DIGEST:
        return value, ""
    if value == NO_DIGEST:
        return None, "the base image has no registry digest (built or loaded locally, not pulled)"
    if env.get("TPRIMAT_RUNTIME") == "docker":
        return None, f"the container was started without {DIGEST_ENV} (not by shell/lib/docker.sh)"
    return None, HOST_RUNTIME


def _shown(value: str | None) -> str:
    return "not published" if value is None else (value or "-")


def markdown() -> str:
    """The table in Markdown, each platform's default and each row not checked here marked; docs/frameworks.md's
    "Tested stacks" names the command."""
    head = ("| Stack | Platform | Image | Runtime | torch | Transformer Engine | megatron-core | Vendor framework | "
            "Collectives | Frameworks |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in ROWS:
        vendor = ", ".join(f"{label} {value}" for label, value in (
            ("Primus", row.primus), ("NeMo", row.nemo), ("Megatron-Bridge", row.megatron_bridge)) if value) or "-"
        name = row.name + (" (default)" if row is default(row.platform) else "") + (
            "" if row.checked else " (not checked here)")
        lines.append(f"| {name} | {row.platform} | {f'`{row.image}`' if row.image else 'host .venv'} | "
                     f"{_shown(row.runtime)} | {_shown(row.torch)} | {_shown(row.transformer_engine)} | "
                     f"{row.megatron_core} | {vendor} | {_shown(row.collectives)} | {', '.join(row.frameworks)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """`markdown`: the table in Markdown, for a reader or a page that shows it."""
    from utils.cli import Parser
    parser = Parser(prog="python3 -m utils.spec.stacks", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("markdown",), help="markdown: print the table in Markdown")
    parser.parse_args(argv)
    print(markdown())
    return 0


if __name__ == "__main__":
    from utils.cli import run
    run(main, "utils.spec.stacks")
