"""One run's request: what the planner asks one framework to do, typed, from plan to result.

The planner (train/plan.py) builds it once from the validated configuration and the launcher writes it as
the run's config.json; every launcher, trainer and generated framework file reads it from there
(`Request.read`), and the result's parallelism and training sections come from it (`result_parallelism`,
`result_training`). Its field names are the result schema's (utils/spec/result.schema.json), so no layer renames
a setting: seq_len is seq_len from config.json to result.json.

config.json holds one object per section below (identity, model, parallelism, training, data, fairness, native,
network, environment, evaluation), each typed, and nothing else: the model as its utils.spec.models.ModelSpec (its fields; a
MODEL_LAYERS proxy's fewer layers included), so that no reader looks it up again from the variant's name, and every
knob a reader needs as a field of a section (the NET_* network settings in `network`, under the knob's name less its
NET_ prefix), so that no untyped copy of the configuration rides along.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping

from utils import run_files
from utils.spec import stacks
from utils.spec.evaluation import Evaluation
from utils.spec.fairness import identity
from utils.spec.models import ModelSpec
from utils.spec.stacks import Stack
from utils.files import parse_json, read_bounded, write_json


class RequestError(ValueError):
    """A config.json that is no request of this checkout; the message names the file and the fix."""


@dataclass(frozen=True)
class Identity:
    """Which run this is."""

    run_id: str  # its directory name inside the run set, e.g. "mega-llama" or "prim-qwen-balanced-r2"
    platform: str  # amd | nvd | cpu
    framework: str  # utils/frameworks: mega | nemo | prim | fsdp | autotp
    model: str  # the registry key (utils/spec/models.py): llama | qwen | llama70b | mistral
    variant: str  # the model variant trained, e.g. "llama3.1-8b" or "qwen2.5-tiny"
    repeat: int  # 1-based
    commit: str | None = None  # the checkout's commit (None: not a git checkout)


@dataclass(frozen=True)
class Parallelism:
    """The layout: the result's parallelism section plus the machine size it runs on."""

    strategy: str  # the named layout (utils/spec/strategies.py), or "custom"
    tp: int
    pp: int
    dp: int
    ga: int  # gradient-accumulation steps (micro-batches per step)
    sequence_parallel: bool
    distributed_optimizer: bool  # the fairness profile's use_distributed_optimizer
    nnodes: int
    gpus_per_node: int  # worker processes per node on the CPU
    num_gpus: int  # TP x PP x DP
    ep: int = 1  # expert-parallel size, within DP (a request written before EP asked for none)


@dataclass(frozen=True)
class Training:
    """The workload and its optimiser: the result's training section, less what the data and profile add."""

    steps: int
    mbs: int
    gbs: int
    seq_len: int
    precision: str  # bf16 | fp8 | fp32
    lr: float
    min_lr: float
    warmup_steps: int
    weight_decay: float
    beta1: float
    beta2: float
    grad_clip: float
    seed: int
    lr_decay_style: str = "cosine"


@dataclass(frozen=True)
class Data:
    """What the run reads: a verified prepared pair, or synthetic tokens."""

    dataset: str
    data_dir: str  # DATA_DIR: the prepared pairs and the tokenizers (a framework's own launcher may want it)
    prefix: str  # Megatron's dataset prefix (no .bin/.idx), utils/datafiles.py
    tokenizer_dir: str
    mock_data: bool


@dataclass(frozen=True)
class Fairness:
    """The fairness profile the run applies (utils/spec/fairness.py) and the workload conventions of its framework."""

    profile: str  # FAIRNESS: spec | tuned
    table: dict  # the profile's full settings table
    workload: dict  # the workload-identity settings this framework applies


@dataclass(frozen=True)
class Native:
    """The torch-native frameworks' own settings (utils/config/native.py); the other frameworks carry them unused."""

    data_parallel: str  # fsdp | ddp: fsdp's data parallelism (FSDP2 fully_shard, or DDP at TP=1)
    compile: bool  # torch.compile each transformer layer
    compile_mode: str  # torch.compile's mode
    sac_every: int  # selective activation checkpointing of every N-th layer; 0: off
    attn_impl: str  # Hugging Face attention: sdpa | flash_attention_2 | eager
    zero_stage: int  # DeepSpeed's ZeRO stage under AutoTP


@dataclass(frozen=True)
class Environment:
    """How this node runs and measures it."""

    node_rank: int
    master_addr: str  # node 0's address for the rendezvous of a multi-node run
    master_port: int
    hf_home: str  # the Hugging Face cache a framework's own launcher is given
    dry_run: bool
    warmup_skip: int  # steps left out of the steady-state figures
    profiling: bool
    profile_start_step: int
    profile_end_step: int
    telemetry: bool = True  # sample the node's GPUs (or CPU) around the trainer (utils/machine/telemetry.py)
    telemetry_interval_ms: int = 1000
    target_device: str = ""  # TARGET_DEVICE: the device predicted for when the run's own is unknown; "": none
    stack: str = ""  # the utils.spec.stacks row it runs on (STACK); "": the platform's default
    image_digest: str | None = None  # the stack's base image as pulled (repo@sha256:...); None: see the note
    image_digest_note: str = ""  # why there is no digest (the host runtime, a locally built image, ...)
    transformer_impl: str = "transformer_engine"  # TRANSFORMER_IMPL: megatron-core's layers on a GPU (fairness.py)


@dataclass(frozen=True)
class Network:
    """The multi-node network settings, config.env's NET_<NAME> knobs as <name> (utils.machine.netenv turns them into
    each vendor's variables); "" leaves a setting to the vendor's default or what is exported."""

    socket_ifname: str = ""  # NET_SOCKET_IFNAME: the bootstrap's and gloo's interface, e.g. eth0 or ^docker,lo
    ib_hca: str = ""  # NET_IB_HCA: the InfiniBand/RoCE adapters, e.g. mlx5_0,mlx5_1
    ib_gid_index: str = ""  # NET_IB_GID_INDEX: the RoCE GID index
    debug: str = ""  # NET_DEBUG: WARN | INFO | ...
    link_gbps: float | None = None  # NET_LINK_GBPS: the inter-node link per GPU in Gb/s (prediction); None: the default

    @classmethod
    def from_knobs(cls, knobs: Mapping[str, Any]) -> "Network":
        """The section from the configuration's NET_* knobs (a knob the mapping lacks keeps its default)."""
        return cls(**{f.name: knobs[f"NET_{f.name.upper()}"] for f in fields(cls) if f"NET_{f.name.upper()}" in knobs})


# A config.json written before held-out validation existed (issue 34) asked for none: no EVAL_INTERVAL, all documents
# train. The numbers besides interval_steps are never read while it is 0.
NO_EVALUATION = Evaluation(interval_steps=0, tokens=1, validation_percent=1)


@dataclass(frozen=True)
class Request:
    """One run's request (config.json)."""

    identity: Identity
    model: ModelSpec  # the variant trained (identity.variant), with every architecture number
    parallelism: Parallelism
    training: Training
    data: Data
    fairness: Fairness
    native: Native
    network: Network
    environment: Environment
    evaluation: Evaluation = NO_EVALUATION  # held-out validation and TARGET_LOSS (utils/spec/evaluation.py)

    @property
    def stack(self) -> Stack:
        """The stack this run runs on (utils/spec/stacks.py): the request's, else its platform's default."""
        return stacks.get(self.environment.stack) if self.environment.stack else stacks.default(self.identity.platform)

    # --- config.json ---------------------------------------------------------------------------------

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = run_files.REQUEST) -> "Request":
        """The request of a config.json object; RequestError names what is missing or unknown."""
        if not isinstance(data, Mapping):
            raise RequestError(f"{where}: not a run request (a JSON object is expected); rerun the launcher")
        sections = {}
        for section in fields(cls):
            kind = globals()[section.type] if isinstance(section.type, str) else section.type
            given = data.get(section.name)
            if given is None and section.default is not dataclasses.MISSING:
                continue  # a section added later, which an older request did not ask for
            if not isinstance(given, Mapping):
                raise RequestError(f"{where}: no '{section.name}' section: written by an older TPrimat or by hand; "
                                   "rerun the launcher to write the request again")
            names = {f.name for f in fields(kind)}
            required = {f.name for f in fields(kind)
                        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
            missing, unknown = sorted(required - set(given)), sorted(set(given) - names)
            if missing or unknown:
                raise RequestError(f"{where}: section '{section.name}' " + "; ".join(
                    part for part in (f"lacks {', '.join(missing)}" if missing else "",
                                      f"has unknown {', '.join(unknown)}" if unknown else "") if part)
                    + "; rerun the launcher to write the request again")
            sections[section.name] = kind(**given)
        return cls(**sections)

    @classmethod
    def read(cls, path: Path) -> "Request":
        try:
            data = parse_json(read_bounded(Path(path)))
        except OSError as err:
            raise RequestError(f"{path}: cannot read the run request ({err.strerror}); give a run directory the "
                               "launcher wrote") from None
        except ValueError as err:
            raise RequestError(f"{path}: {err}") from None
        return cls.from_json(data, str(path))

    def write(self, path: Path) -> None:
        """config.json, atomically."""
        write_json(Path(path), self.to_json())

    # --- The result's sections ------------------------------------------------------------------------

    def result_sections(self, *, dataset_fingerprint: str | None = None,
                        tokenizer_fingerprint: str | None = None) -> dict:
        """Every utils.spec.result.build_result argument the request decides, for `build_result(**sections, ...)`:
        the one place a result's identity, layout, workload and measurement window come from."""
        return {"platform": self.identity.platform, "framework": self.identity.framework,
                "variant": self.identity.variant, "parallelism": self.result_parallelism(),
                "training": self.result_training(dataset_fingerprint=dataset_fingerprint,
                                                 tokenizer_fingerprint=tokenizer_fingerprint),
                "warmup_skip": self.environment.warmup_skip, "num_gpus": self.parallelism.num_gpus,
                "stack": self.result_stack()}

    def result_stack(self) -> dict:
        """The result's stack section: the row's name and image, and the image's digest or why there is none. A GPU
        run on the host runtime ran in no image: its stack is "host" (the software section says what it imported),
        never the row it was planned for, so that compare does not credit that row's image with its figures."""
        env = self.environment
        if self.stack.image and env.image_digest_note == stacks.HOST_RUNTIME:
            return {"name": "host", "image": None, "image_digest": None,
                    "image_digest_note": f"{stacks.HOST_RUNTIME} (TPRIMAT_PYTHON's packages), not {self.stack.name}'s "
                                         f"image {self.stack.image}"}
        return {"name": self.stack.name, "image": self.stack.image, "image_digest": env.image_digest,
                **({} if env.image_digest else {"image_digest_note": env.image_digest_note or "not recorded"})}

    def result_parallelism(self) -> dict:
        """The result's parallelism section."""
        p = self.parallelism
        return {"strategy": p.strategy, "tp": p.tp, "pp": p.pp, "dp": p.dp, "ga": p.ga, "ep": p.ep, "nnodes": p.nnodes,
                "sequence_parallel": p.sequence_parallel, "distributed_optimizer": p.distributed_optimizer}

    def result_training(self, *, dataset_fingerprint: str | None = None,
                        tokenizer_fingerprint: str | None = None) -> dict:
        """The result's training section: the workload, the data and the workload-identity fields."""
        mock = self.data.mock_data
        return {**dataclasses.asdict(self.training),
                "dataset": None if mock else self.data.dataset, "mock_data": mock,
                "dataset_fingerprint": dataset_fingerprint, "tokenizer_fingerprint": tokenizer_fingerprint,
                **identity(self.fairness.profile, self.fairness.table, self.fairness.workload,
                           self.training.precision, self.evaluation.megatron_split())}
