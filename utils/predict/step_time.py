"""A lower bound on one run's step time: compute at the device's dense peak, tensor-parallel and data-parallel
collectives from their bytes and the links' bandwidth, and the pipeline bubble.

Each part is a floor the hardware cannot beat, not a forecast: a measured step divided by the bound (the result's
prediction.efficiency) says how far the run is from what the device and its links allow.

- Compute: TPrimat's FLOPs per token (utils.spec.models, Megatron's convention) x the step's tokens / GPUs / dense peak
  at the run's precision (utils.machine.hardware).
- Tensor parallelism: 4 all-reduces of one microbatch's b x s x h activations per layer (2 in forward after the
  attention and MLP row-parallel projections, 2 in backward for the column-parallel inputs' gradients; with
  sequence parallelism each is an all-gather plus a reduce-scatter, the same bytes: Korthikanti et al. 2022, sec.
  4.2.2), each moving 2 (t-1)/t of the buffer per GPU (ring all-reduce), over the intra-node link when the TP group
  fits in a node, else the inter-node one.
- Data parallelism, per step (a Megatron MoE's routed experts over their DP / EP expert replicas, the rest over DP):
  the gradient reduce-scatter and the parameter all-gather of the distributed optimizer
  and of ZeRO 1/2 ((d-1)/d of the bytes each), an all-reduce for DDP and ZeRO 0 (2 (d-1)/d); FSDP2 all-gathers the
  parameters for every microbatch's forward and again for its backward (reshard_after_forward). Hierarchically: the
  k ranks of the group inside a node move (k-1)/k of the bytes over the intra-node link, and each then (m-1)/m of
  its 1/k over the inter-node link across the m nodes (one adapter per GPU). Hidden behind compute where the
  framework overlaps it (the tuned profile's overlap_grad_reduce, FSDP2 and DDP always): only what exceeds the
  compute counts.
- Expert parallelism (a mixture of experts at EP > 1): megatron-core's all-to-all token dispatcher sends each of a
  rank's tokens to its top-k experts and brings them back, in forward and again in backward: 4 all-to-alls a MoE
  layer and microbatch of b x s / TP tokens x top-k x h activations, each rank keeping 1/EP of them and sending the
  rest, over the intra-node link to the ranks of its node and the inter-node one to the others. Not overlapped:
  the experts wait for their tokens (MOE_ROUTING's dispatcher overlaps nothing).
- Pipeline bubble: 1F1B idles (PP-1)/(GA+PP-1) of the step, i.e. (PP-1)/GA x the busy time; point-to-point sends
  between stages (one microbatch's activations) are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from utils.config.native import REPLICATED
from utils.machine.hardware import INTER_NODE_GBPS, DeviceSpec
from utils.spec.models import ModelSpec
from utils.predict.memory import MEMORY_MODELS, Layout
from utils.predict.parameters import megatron_expert_numels


@dataclass(frozen=True)
class Links:
    """The two links a collective can cross, in bytes/s per GPU per direction."""

    intra: float
    inter: float
    gpus_per_node: int
    nnodes: int


@dataclass(frozen=True)
class TimeBound:
    """Seconds per step by part; step_s = compute + tp + ep + bubble + the data-parallel time not hidden behind
    compute."""

    compute_s: float
    tp_s: float
    dp_s: float
    dp_exposed_s: float
    bubble_s: float
    step_s: float
    intra_gb_s: float
    inter_gb_s: float
    ep_s: float = 0.0  # the expert-parallel all-to-alls

    def parts(self) -> dict[str, float]:
        return {"compute_s": self.compute_s, "tp_s": self.tp_s, "ep_s": self.ep_s, "dp_s": self.dp_exposed_s,
                "bubble_s": self.bubble_s}


def links(device: DeviceSpec, gpus_per_node: int, nnodes: int, link_gbps: float | None) -> Links:
    """The device's intra-node link and the inter-node one (NET_LINK_GBPS, Gb/s, else utils.machine.hardware's default)."""
    inter = (link_gbps if link_gbps is not None else INTER_NODE_GBPS) * 1e9 / 8
    return Links(float(device.intra_gb_s or 0.0) * 1e9, inter, gpus_per_node, nnodes)


def collective_s(volume: float, group: int, inside: int, net: Links) -> float:
    """Seconds for a reduce-scatter or all-gather of `volume` bytes over a group of `group` ranks with `inside` of
    them per node: (k-1)/k over the intra-node link, then (m-1)/m of 1/k over the inter-node link."""
    if group <= 1:
        return 0.0
    k = max(1, min(group, inside))
    m = -(-group // k)
    within = (k - 1) / k * volume / net.intra if k > 1 else 0.0
    across = (m - 1) / m * volume / k / net.inter if m > 1 else 0.0
    return within + across


def all_to_all_s(volume: float, group: int, inside: int, net: Links) -> float:
    """Seconds for an all-to-all in which each of `group` ranks (`inside` of them per node) holds `volume` bytes and
    keeps 1/group of them: (k-1)/group sent over the intra-node link, the rest of the (group-1)/group over the
    inter-node one."""
    if group <= 1:
        return 0.0
    k = max(1, min(group, inside))
    return (k - 1) / group * volume / net.intra + ((group - k) / group * volume / net.inter if group > k else 0.0)


def ep_volume(spec: ModelSpec, lay: Layout) -> float:
    """Bytes one rank's all-to-alls hold in a step (module docstring): 0 for a dense model or at EP = 1."""
    if spec.moe is None or lay.ep <= 1:
        return 0.0
    per_layer = 4 * lay.mbs * lay.seq_len // lay.tp * spec.moe.top_k * spec.hidden_size * lay.width
    return float(per_layer * (spec.num_layers // lay.pp) * lay.ga)


def stage_parameters(spec: ModelSpec, lay: Layout) -> int:
    """Parameters one TP rank of the first stage holds (what its data-parallel group reduces and gathers), as its
    memory model holds them (utils.predict.memory.MEMORY_MODELS)."""
    return MEMORY_MODELS[lay.memory_model].parameters(spec, lay)


def megatron_dp(n: int, lay: Layout, w: int, g: int) -> tuple[float, bool]:
    """The distributed optimizer's reduce-scatter of gradients and all-gather of parameters, else DDP's all-reduce;
    overlapped where the profile's overlap_grad_reduce says."""
    return (n * (g + w) if lay.distributed_optimizer else 2 * n * g), lay.overlap_grad_reduce


def fsdp_dp(n: int, lay: Layout, w: int, g: int) -> tuple[float, bool]:
    """DDP's all-reduce; FSDP2's all-gathers for every microbatch's forward and backward and one reduce-scatter, or
    one for every microbatch where each reduces (the entry's synced_microbatches: torchtitan); both overlapped."""
    if lay.data_parallel == REPLICATED:
        return 2 * n * g, True
    return n * (2 * lay.ga * w + (lay.ga if lay.synced_microbatches else 1) * g), True


def autotp_dp(n: int, lay: Layout, w: int, g: int) -> tuple[float, bool]:
    """ZeRO 1/2: reduce-scatter and all-gather; ZeRO 0: an all-reduce; 16-bit, not overlapped."""
    return 2 * n * w, False


# Each memory model's data-parallel traffic, keyed as utils.predict.memory.MEMORY_MODELS
DP_VOLUME: dict[str, Callable[[int, Layout, int, int], tuple[float, bool]]] = {
    "megatron": megatron_dp, "fsdp2": fsdp_dp, "deepspeed": autotp_dp}


def dp_volume(spec: ModelSpec, lay: Layout, parameters: int | None = None) -> tuple[float, bool]:
    """Bytes per GPU the step's data-parallel collectives move, in reduce-scatter/all-gather units (an all-reduce
    counts twice), and whether the framework overlaps them with compute; of the stage's parameters, or of those
    given."""
    w, n = lay.width, stage_parameters(spec, lay) if parameters is None else parameters
    return DP_VOLUME[lay.memory_model](n, lay, w, 4 if lay.grad_fp32 else w)


def expert_parameters(spec: ModelSpec, lay: Layout) -> int:
    """The routed experts one rank of a Megatron first stage holds (experts / EP of each layer's): megatron-core
    reduces and gathers them over the DP / EP expert replicas, not over DP; 0 for a dense model or another memory
    model (the torch-native frameworks run EP = 1, their experts reduced with the rest)."""
    if spec.moe is None or lay.memory_model != "megatron":
        return 0
    return sum(megatron_expert_numels(spec, lay.tp, spec.num_layers // lay.pp, lay.ep))


def bound(spec: ModelSpec, lay: Layout, device: DeviceSpec, net: Links) -> TimeBound | None:
    """The step's lower bound on this device, or None when the device has no peak at the run's precision."""
    # at the precision's own peak (MXFP8 at FP8's, the FP4 formats at FP4's); a CPU's fp32 run projected onto a GPU
    # would train bf16 there
    peak = device.peak_tflops("bf16" if lay.precision == "fp32" else lay.precision)
    if peak is None or net.intra <= 0:
        return None
    gpus = lay.tp * lay.pp * lay.dp
    tokens = lay.mbs * lay.dp * lay.ga * lay.seq_len
    compute = spec.flops_per_token(lay.seq_len) * tokens / gpus / (peak * 1e12)
    tp = 0.0
    if lay.tp > 1:
        per_layer = 4 * 2 * lay.mbs * lay.seq_len * spec.hidden_size * lay.width
        tp = collective_s(per_layer * (spec.num_layers // lay.pp) * lay.ga, lay.tp, net.gpus_per_node, net)
    volume, overlapped = dp_volume(spec, lay)
    experts, _ = dp_volume(spec, lay, expert_parameters(spec, lay))
    inside = max(1, net.gpus_per_node // lay.tp)  # TP groups are consecutive ranks: DP and EP groups stride nodes
    dp = collective_s(volume - experts, lay.dp, inside, net) + collective_s(experts, lay.dp // lay.ep, inside, net)
    ep = all_to_all_s(ep_volume(spec, lay), lay.ep, inside, net)
    bubble = (compute + tp + ep) * (lay.pp - 1) / lay.ga
    exposed = max(0.0, dp - compute) if overlapped else dp
    return TimeBound(compute, tp, dp, exposed, bubble, compute + tp + ep + bubble + exposed,
                     net.intra / 1e9, net.inter / 1e9, ep)
