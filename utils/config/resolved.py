"""Config: the validated, typed configuration of one invocation, and what follows from it (the global
batch, the GPU count, each model's spec, a MODEL_LAYERS proxy's included, and each strategy's layout)."""

from __future__ import annotations

from dataclasses import dataclass, field

from utils.config.selection import model_layers
from utils.spec import stacks
from utils.spec.models import ModelSpec, get_model
from utils.spec.strategies import CUSTOM, Layout, lookup


@dataclass
class Config:
    """The validated, typed configuration of one invocation."""

    values: dict  # knob -> typed value, in config.env's order
    sources: dict[str, str]  # knob -> where its value came from (config.env, its CPU profile, environment, ...)
    launch: str  # local | slurm (resolved LAUNCHER)
    models: list[ModelSpec]
    frameworks: list[str]
    strategies: list[str]
    detected_platform: str  # what this machine has, whatever PLATFORM says
    detected_gpus: int
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    strategy_table: dict = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict)  # knob -> its text as written, for problem lines
    stack_name: str = ""  # the utils.spec.stacks row STACK resolved to for this platform; "": the platform's default

    def __post_init__(self) -> None:
        """The models as MODEL_LAYERS makes them, whoever built the list."""
        self.models = [self.model(spec.key) for spec in self.models]

    def __getitem__(self, key: str):
        return self.values[key]

    @property
    def platform(self) -> str:
        return self.values["PLATFORM"]

    @property
    def stack(self) -> stacks.Stack:
        """The stack this invocation runs on (STACK's row of this platform, else the platform's newest)."""
        return stacks.get(self.stack_name) if self.stack_name else stacks.default(self.platform)

    @property
    def gbs(self) -> int:
        """The configured global batch; every strategy keeps it."""
        return self.values["MBS"] * self.values["DP"] * self.values["GA"]

    @property
    def num_gpus(self) -> int:
        return self.values["NNODES"] * self.values["GPUS_PER_NODE"]

    def model(self, key: str) -> ModelSpec:
        """The model's spec at MODEL_SIZE; with MODEL_LAYERS, its proxy of that many layers (a count beyond the
        model's depth is selection.layer_problems' line, and leaves the model whole meanwhile)."""
        spec, layers = get_model(key, self.values["MODEL_SIZE"]), model_layers(self.values)
        return spec if layers is None or layers > spec.num_layers else get_model(key, spec.size, layers)

    def layout(self, model_key: str, strategy: str | None = None) -> Layout:
        """TP/PP/DP/GA/EP of a model under a strategy (default: the first strategy of this run)."""
        name = strategy or self.strategies[0]
        if name == CUSTOM:
            v = self.values
            return Layout(v["TP"], v["PP"], v["DP"], v["GA"], v["EP"])
        found = lookup(self.strategy_table, name, self.platform, model_key)
        if found is None:
            raise KeyError(f"strategy {name!r} has no layout for {model_key} on {self.platform}")
        tp, pp, dp, ep = found
        return Layout(tp, pp, dp, self.gbs // (self.values["MBS"] * dp), ep)

    def as_dict(self) -> dict:
        """JSON-ready: every knob's resolved value plus what is derived from them."""
        return {
            **self.values,
            "GBS": self.gbs,
            "NUM_GPUS": self.num_gpus,
            "LAUNCH_MODE": self.launch,
            "STACK_NAME": self.stack.name,
            "STACK_IMAGE": self.stack.image or "",
            "FRAMEWORKS": self.frameworks,
            "STRATEGIES": self.strategies,
            "MODEL_VARIANTS": {m.key: m.variant for m in self.models},
            "LAYOUTS": {s: {m.key: vars(self.layout(m.key, s)) for m in self.models} for s in self.strategies},
        }
