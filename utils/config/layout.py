"""How a run spreads over GPUs and nodes (config.env's Parallelism and Nodes sections), with the rules
every layout obeys: TP divides the heads, PP the layers, TP x PP x DP covers every GPU, GA keeps the
global batch, and the node is the one the configuration says."""

from __future__ import annotations

from typing import TYPE_CHECKING

from utils.config.parse import COUNT, POSITIVE, Knob
from utils.spec.models import ModelSpec
from utils.spec.strategies import CUSTOM, Layout, lookup

if TYPE_CHECKING:
    from utils.config.resolved import Config

PARALLELISM = {
    "TP": POSITIVE,
    "PP": POSITIVE,
    "DP": POSITIVE,
    "GA": POSITIVE,
}

NODES = {
    "NNODES": POSITIVE,
    "GPUS_PER_NODE": POSITIVE,
    "NODE_RANK": COUNT,
    "MASTER_ADDR": Knob("str", pattern=r"[A-Za-z0-9.:_-]+",
                        rule="an IP address or host name of node 0 (ASCII letters, digits, . - : _)"),
    "MASTER_PORT": Knob("int", low=1, high=65535),
}


def node_problems(config: Config) -> list[str]:
    """This node's GPUs and rank against NNODES x GPUS_PER_NODE (Slurm's nodes are checked where they run)."""
    v, found = config.values, []
    gpus = config.detected_gpus
    if config.platform != "cpu" and config.platform == config.detected_platform and gpus \
            and config.launch != "slurm" and v["GPUS_PER_NODE"] != gpus:
        found.append(f"GPUS_PER_NODE={v['GPUS_PER_NODE']}: this node has {gpus} GPUs; "
                     f"set GPUS_PER_NODE={gpus} and TP x PP x DP to match")
    if v["NODE_RANK"] >= v["NNODES"]:
        found.append(f"NODE_RANK={v['NODE_RANK']}: must be < NNODES={v['NNODES']}")
    return found


def layout_problems(config: Config) -> list[str]:
    """Every strategy's layout of every model: one the table lacks, or one that breaks a layout rule."""
    found: list[str] = []
    for name in config.strategies:
        label = "" if name == CUSTOM else f"STRATEGY={name}: "
        for spec in config.models:
            if name != CUSTOM and lookup(config.strategy_table, name, config.platform, spec.key) is None:
                found.append(f"STRATEGY={name}: no layout for {spec.key} on {config.platform}; "
                             "add one to STRATEGIES_FILE or choose another strategy")
                continue
            found += _check_layout(label, spec, config.layout(spec.key, name), config)
    return found


def _check_layout(label: str, spec: ModelSpec, layout: Layout, config: Config) -> list[str]:
    """The rules every TP/PP/DP/GA layout obeys, for one model."""
    found, mbs = [], config["MBS"]
    if spec.num_attention_heads % layout.tp or spec.num_kv_heads % layout.tp:
        found.append(f"{label}TP={layout.tp}: {spec.display_name} has {spec.num_attention_heads} attention "
                     f"heads and {spec.num_kv_heads} KV heads; valid TP for {spec.key}: "
                     + ", ".join(map(str, spec.valid_tp())))
    if spec.num_layers % layout.pp:
        found.append(f"{label}PP={layout.pp}: {spec.display_name} has {spec.num_layers} layers; "
                     f"valid PP for {spec.key}: " + ", ".join(map(str, spec.valid_pp())))
    if layout.gpus != config.num_gpus:
        found.append(f"{label}TP x PP x DP = {layout.tp} x {layout.pp} x {layout.dp} = {layout.gpus} "
                     f"for {spec.key}, but NNODES x GPUS_PER_NODE = {config.num_gpus}; make them equal")
    if config.gbs % (mbs * layout.dp):
        found.append(f"{label}DP={layout.dp}: the global batch {config.gbs} (MBS x DP x GA) is not a multiple of "
                     f"MBS x DP = {mbs * layout.dp}, so GA cannot keep it for {spec.key}")
    return found
