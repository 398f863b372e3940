"""Project one measured GPU run to many nodes: data-parallel weak scaling, as a model-based projection.

    python3 -m evaluate.project RESULT.json --nodes 1,2,4,8,16,32,64,128,256,512,1024 [--link-gbps 400]
                                [--tokens 1e12]

Each GPU keeps the measured run's work (TP, PP, micro-batch, GA, sequence length); more nodes add data-parallel
replicas, so the global batch grows with them. The measured step is split into what the time bound calls
data-parallel communication (utils/predict/step_time.py, at the measured layout) and the rest, which is taken as it was
measured (the run's own compute efficiency, TP and bubble); at N nodes the data-parallel part is the bound's again,
for the larger group over the inter-node link (--link-gbps, else NET_LINK_GBPS, else utils/machine/hardware.py's 400 Gb/s).
Printed per node count: GPUs, projected step time, tokens/s/GPU, and the time to train --tokens (else
PROJECT_TOKENS) tokens. A projection, not a measurement: the assumptions are printed with it.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path

from utils.cli import Parser, UsageError, positive_number, quoted, run
from utils.config import ConfigError, load_config
from utils.config.native import SHARDED
from utils.spec.fairness import profile
from utils.machine.hardware import INTER_NODE_GBPS, lookup_device
from utils.spec.models import by_variant
from utils.predict.memory import Layout
from utils.predict.step_time import bound, links
from utils.spec.result_types import Section, typed
from evaluate.gate import gated

LABEL = "MODEL-BASED PROJECTION (not a measurement)"


def node_counts(text: str) -> list[int]:
    """--nodes 1,2,4: positive integers, in the order given."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        counts = []
    if not counts or any(n < 1 for n in counts):
        raise UsageError(f"--nodes {text!r}: give node counts of at least 1, e.g. 1,2,4,8")
    return counts


def read(path: Path) -> dict:
    """A result of a GPU run with a step time that passes evaluate.validate (evaluate.gate); one line naming the
    problem otherwise."""
    if not path.is_file():
        raise UsageError(f"{path}: no such file; give a run's result.json")
    found = gated([path])
    if found.rejected:
        raise UsageError(f"{found.rejected[0].line()}; give a run's result.json")
    item = found.results[0]
    if not item.ok:
        why = item.failures[0] if item.failures else f"its run is {item.verdict}"
        raise UsageError(f"{path}: {quoted(why)}: it fails validate, so nothing is projected from it")
    step_time = item.typed.performance.step_time_s
    if not (step_time and step_time.median):
        raise UsageError(f"{path}: the run has no measured step time to project from; give a successful run's result")
    return item.result


def layout(result: dict | Section) -> Layout:
    """The measured run's layout for the time bound (the fairness profile's DP settings; the torch-native settings
    the run read back)."""
    r = typed(result)
    p, t = r.parallelism, r.training
    read_back = r.effective.extra if r.effective else {}  # effective's settings are no field the schema names
    table = profile(str(t.fairness_profile or "spec"))
    return Layout(framework=r.framework, tp=p.tp, pp=p.pp, dp=p.dp, ga=p.ga, ep=p.ep or 1, mbs=t.mbs, seq_len=t.seq_len,
                  precision=t.precision, grad_fp32=bool(table["grad_reduce_in_fp32"]) or t.precision == "fp32",
                  distributed_optimizer=bool(table["use_distributed_optimizer"]),
                  overlap_grad_reduce=bool(table["overlap_grad_reduce"]),
                  data_parallel=str(read_back.get("data_parallel") or SHARDED),
                  zero_stage=int(read_back.get("zero_stage") or 1))


def knob(name: str, given: float | None, flag: str) -> float | None:
    """A flag's value, else the configuration's knob (None when neither is set)."""
    if given is not None:
        return given
    try:
        return load_config()[name]
    except ConfigError as err:
        raise UsageError(f"{name} cannot be read from the configuration ({err}); pass {flag}") from None


def duration(seconds: float) -> str:
    days, rest = divmod(seconds, 86400)
    return f"{days:.0f}d {rest / 3600:.1f}h" if days else f"{rest / 3600:.1f}h"


@dataclass(frozen=True)
class Point:
    """The projection at one node count."""

    nodes: int
    gpus: int
    step_s: float
    tokens_per_gpu: float  # tokens/s/GPU


@dataclass(frozen=True)
class NodeProjection:
    """One measured run projected to several node counts, with what it assumes."""

    header: str
    assumptions: list[str]
    measured_tokens_per_gpu: float
    points: list[Point]


def projection(result: dict | Section, counts: list[int], link_gbps: float | None) -> NodeProjection:
    """The measured run at each node count; UsageError naming why a result cannot be projected (a CPU run)."""
    r = typed(result)
    gpu = (r.system.gpu if r.system else None) or {}  # free-form: a table of what the probe found
    device = lookup_device(gpu.get("name")) if gpu.get("name") else None
    if device is None or device.intra_gb_s is None:
        raise UsageError(f"the run's device {gpu.get('name')!r} has no entry in utils/machine/hardware.py (a CPU run, or an "
                         "unknown GPU): nothing to project with; give a GPU run's result")
    spec, lay = by_variant(r.model.variant), layout(r)
    nodes = int(r.parallelism.nnodes or 1)
    per_node = r.parallelism.num_gpus // nodes
    measured = float(r.performance.step_time_s.median)
    here = bound(spec, lay, device, links(device, per_node, nodes, link_gbps))
    if here is None:
        raise UsageError(f"{device.name} has no {lay.precision} peak in utils/machine/hardware.py: nothing to project with")
    rest = measured - here.dp_exposed_s
    tokens_per_gpu = lay.mbs * lay.ga * lay.seq_len
    gbps = link_gbps if link_gbps is not None else INTER_NODE_GBPS
    points = []
    for count in counts:
        grown = replace(lay, dp=lay.dp * count // nodes if count >= nodes else max(1, lay.dp * count // nodes))
        there = bound(spec, grown, device, links(device, per_node, count, link_gbps))
        step = rest + there.dp_exposed_s
        points.append(Point(count, grown.tp * grown.pp * grown.dp, step, tokens_per_gpu / step))
    header = (f"{LABEL}: {r.framework} {spec.display_name} on {device.name}, TP{lay.tp} PP{lay.pp} "
              f"GA{lay.ga} MBS{lay.mbs} SL{lay.seq_len}, {per_node} GPU(s) per node, measured on {nodes} node(s): "
              f"median step {measured:.3f} s, {tokens_per_gpu / measured:,.0f} tokens/s/GPU")
    assumptions = [
        "assumptions: data-parallel weak scaling (each GPU keeps its work; the global batch grows with the nodes);",
        f"  the measured step less the bound's exposed data-parallel time ({here.dp_exposed_s:.3f} s) stays as "
        f"measured ({rest:.3f} s: the run's compute efficiency, TP and bubble);",
        f"  data-parallel time from the bound's communication model: ring reduce-scatter/all-gather over "
        f"{device.intra_gb_s:g} GB/s inside a node and {gbps:g} Gb/s per GPU between nodes, overlap as the run's "
        "framework and profile do; no congestion, no stragglers, no failures"]
    return NodeProjection(header, assumptions, tokens_per_gpu / measured, points)


def table(result: dict | Section, counts: list[int], link_gbps: float | None, tokens: float | None) -> list[str]:
    """The projection's lines: what was measured, the assumptions, then one row per node count."""
    return lines(projection(result, counts, link_gbps), tokens)


def lines(projected: NodeProjection, tokens: float | None) -> list[str]:
    """A projection's lines, with the time to train `tokens` where given."""
    out = [projected.header, *projected.assumptions, "",
           f"{'nodes':>6} {'GPUs':>7} {'step (s)':>9} {'tokens/s/GPU':>13} {'vs measured':>11}"
           + (f" {'time for ' + format(tokens, '.3g') + ' tokens':>22}" if tokens else "")]
    for point in projected.points:
        line = (f"{point.nodes:>6} {point.gpus:>7} {point.step_s:>9.3f} {point.tokens_per_gpu:>13,.0f} "
                f"{point.tokens_per_gpu / projected.measured_tokens_per_gpu:>10.1%}")
        if tokens:
            line += f" {duration(tokens / (point.tokens_per_gpu * point.gpus)):>22}"
        out.append(line)
    if not tokens:
        out.append("(no token count: set PROJECT_TOKENS or pass --tokens for the time to train)")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m evaluate.project", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("result", type=Path, metavar="RESULT.json", help="a GPU run's result.json")
    parser.add_argument("--nodes", required=True, help="comma list of node counts, e.g. 1,2,4,8,...,1024")
    parser.add_argument("--link-gbps", type=positive_number, default=None, help="inter-node bandwidth per GPU, Gb/s "
                        "(default NET_LINK_GBPS, else 400)")
    parser.add_argument("--tokens", type=positive_number, default=None, help="tokens to train (default PROJECT_TOKENS)")
    args = parser.parse_args(argv)
    counts = node_counts(args.nodes)
    result = read(args.result)
    link = knob("NET_LINK_GBPS", args.link_gbps, "--link-gbps")
    print("\n".join(table(result, counts, link, knob("PROJECT_TOKENS", args.tokens, "--tokens"))))
    return 0


if __name__ == "__main__":
    run(main, "evaluate.project")
