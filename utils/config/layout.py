"""How a run spreads over GPUs and nodes (config.env's Parallelism and Nodes sections), with the rules
every layout obeys: TP divides the heads, PP the layers, TP x PP x DP covers every GPU, GA keeps the
global batch, EP > 1 splits a mixture of experts only (dividing DP and the experts), and the node is the one the
configuration says. Context parallelism is not a layout dimension yet (CP = 1): its rule (megatron-core's world size
over TP x CP x PP) comes with it."""

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
    "EP": POSITIVE,
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
    """The rules every TP/PP/DP/GA/EP layout obeys, for one model."""
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
    return found + _expert_problems(label, spec, layout)


def _expert_problems(label: str, spec: ModelSpec, layout: Layout) -> list[str]:
    """EP's rules, megatron-core's own (utils/upstream/table.py: mcore-ep-needs-experts, mcore-ep-divides-dp,
    mcore-ep-divides-experts), checked here so that no run starts to fail in its parallel-state set-up."""
    ep = layout.ep
    if ep == 1:
        return []
    if spec.moe is None:
        return [f"{label}EP={ep}: {spec.variant} has no experts; set EP=1"]
    experts, found = spec.moe.num_experts, []
    if layout.dp % ep:
        found.append(f"{label}EP={ep}: the expert-parallel ranks are carved out of DP={layout.dp} (megatron-core), "
                     f"so EP must divide DP for {spec.key}; valid EP: " + _divisors(layout.dp, experts))
    if experts % ep:
        found.append(f"{label}EP={ep}: {spec.display_name} has {experts} experts per layer, which EP must divide; "
                     f"valid EP for {spec.key}: " + _divisors(experts, experts))
    return found


def _divisors(n: int, experts: int) -> str:
    """The EP values dividing n and the experts, as a problem line lists them."""
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0 and experts % d == 0)
