"""The benchmarked models, their tiny CPU variants and their fewer-layer proxies: the one source of every model number.

Llama 3.1 8B and Qwen 2.5 7B are benchmarked; Llama 3.1 70B is there for proxies (MODEL_LAYERS: its
first N layers at full width), Mistral 7B v0.1 for sliding-window attention, Qwen3-30B-A3B and GPT-OSS-20B for
mixture-of-experts (MoE: a model whose spec has a MoESpec; every other is dense; GPT-OSS also brings attention sinks,
alternating windows, biases, a clamped SwiGLU and YaRN: FEATURES). A model is one entry of ENTRIES: its
spec (every number the trainers, the FLOPs formula and the predictions need, tied embeddings and the Hugging Face
family included) and the changes that make its tiny CPU variant; a framework that trains from shipped recipes names
it in its registry entry (utils/frameworks/), and one without a name for it skips it.

Standard library only: utils.config imports it to validate TP/PP before any environment exists.
The FLOPs formula lives here too (Megatron's convention, causal attention halved; a MoE model's weights counted as
its active ones: attention, router, the top-k routed and the shared experts), so every framework's throughput is
converted to TFLOP/s the same way.

    python3 -m utils.spec.models gated llama,qwen   # the gated tokenizers: KEY, Hub repository, name (tab-separated)
    python3 -m utils.spec.models data-keys llama,llama70b   # the models whose data to prepare: llama

The shell asks it before preparing data: a gated model's tokenizer needs HF_TOKEN. A model that uses
another's tokenizer (Llama 3.1 70B: Llama 3.1 8B's) is answered with that model, whose tokenizer and
prepared data it shares.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field, replace

from utils.cli import Parser

MODEL_SIZES = ("full", "tiny")
SCORE_FUNCTIONS = ("softmax", "sigmoid")  # the router's expert scores (megatron-core's moe_router_score_function)
LOAD_BALANCING = ("aux_loss", "seq_aux_loss", "none")  # megatron-core's moe_router_load_balancing_type names
# What a model may have beyond a Llama-style decoder, besides experts and QK-norm (ModelSpec.features): a framework
# that builds models from the spec names those it builds (utils/frameworks: Framework.features), and skips a model
# with another one, saying which.
FEATURES = ("sliding_window", "alternating_window", "attention_sinks", "linear_bias", "clamped_swiglu", "yarn")


@dataclass(frozen=True)
class MoESpec:
    """A mixture-of-experts MLP in every layer, in place of the dense SwiGLU (names after Hugging Face's qwen3_moe
    config.json where it has one). Each expert, routed or shared, is a SwiGLU MLP without biases."""

    num_experts: int  # routed experts per layer (num_experts)
    top_k: int  # experts each token is routed to (num_experts_per_tok)
    expert_ffn_size: int  # each routed expert's SwiGLU width (moe_intermediate_size)
    shared_experts: int = 0  # experts every token passes through besides its top-k (0: none, as in Qwen3)
    shared_expert_ffn_size: int = 0  # each shared expert's SwiGLU width
    score_function: str = "softmax"  # one of SCORE_FUNCTIONS: the router's scores over the experts
    norm_topk_prob: bool = True  # the top-k probabilities renormalised to sum to 1 (megatron: not pre_softmax)
    load_balancing: str = "aux_loss"  # one of LOAD_BALANCING
    aux_loss_coeff: float = 0.0  # the load-balancing loss's weight (router_aux_loss_coef)

    def __post_init__(self) -> None:
        shared = (self.shared_experts > 0) == (self.shared_expert_ffn_size > 0)
        if not (1 <= self.top_k <= self.num_experts and self.score_function in SCORE_FUNCTIONS
                and self.load_balancing in LOAD_BALANCING and shared):
            raise ValueError(f"MoESpec {self}: top_k must be 1..num_experts, score_function one of {SCORE_FUNCTIONS}, "
                             f"load_balancing one of {LOAD_BALANCING}, shared experts a count with a width")

    def mlp_weights(self, hidden: int, active: bool) -> int:
        """One layer's MLP weights: the router (experts x hidden, no bias), the routed experts (all, or the top-k
        a token passes through when active) and the shared experts."""
        routed = self.top_k if active else self.num_experts
        return (self.num_experts * hidden + routed * 3 * hidden * self.expert_ffn_size
                + self.shared_experts * 3 * hidden * self.shared_expert_ffn_size)


@dataclass(frozen=True)
class ModelSpec:
    """Architecture numbers of one model variant (names follow Hugging Face's config.json)."""

    key: str  # one of MODEL_KEYS: the name used in configuration, file names and scripts
    hf_family: str  # its Hugging Face architecture (config.json's model_type): llama | qwen2 | mistral
    variant: str  # exact variant recorded in results, e.g. "llama3.1-8b" or "llama3.1-8b-tiny"
    display_name: str
    hf_id: str  # Hub repository of the model (its tokenizer files are what TPrimat downloads)
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int  # SwiGLU intermediate size (a MoE model's: its config's dense width, which no layer uses)
    num_attention_heads: int
    num_kv_heads: int  # GQA query groups
    vocab_size: int  # padded embedding rows
    max_position_embeddings: int
    rope_theta: float
    norm_eps: float
    qkv_bias: bool
    tied_embeddings: bool = False  # the LM head reuses the input embedding's matrix (Llama 3.2 1B and 3B)
    rope_scaling: dict = field(default_factory=dict)  # Llama 3 frequency scaling, empty if none
    gated: bool = False  # the Hub repository needs HF_TOKEN and an accepted licence
    sliding_window: int | None = None  # attention sees at most this many earlier tokens (Mistral 7B v0.1); None: all
    proxy_of: str | None = None  # the full-depth variant whose layers this one keeps fewer of (MODEL_LAYERS)
    data_of: str | None = None  # the model whose tokenizer, and so whose prepared data, this one uses; None: its own
    explicit_head_dim: int | None = None  # each head's width where it is not hidden / heads (Qwen3 MoE); None: it is
    qk_norm: bool = False  # RMSNorm over each head's queries and keys, one weight of head_dim each (Qwen3)
    moe: MoESpec | None = None  # every layer's MLP is a mixture of experts; None: dense
    # with a sliding window, layers N, 2N, ... (counted from 1) see every earlier token (GPT-OSS: 2, Megatron's
    # window_attn_skip_freq); None: every layer is windowed
    full_attention_every: int | None = None
    attention_sinks: bool = False  # a learned logit per head that takes its share of each query's softmax (GPT-OSS)
    linear_bias: bool = False  # every linear layer has a bias: QKV, output, router and experts (GPT-OSS)
    # GPT-OSS's clamped SwiGLU: gate * sigmoid(1.702 gate) * (up + 1), with gate <= limit and |up| <= limit
    swiglu_limit: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.moe, dict):  # as a run's config.json holds it (utils.spec.request reads it back)
            object.__setattr__(self, "moe", MoESpec(**self.moe))

    @property
    def data_key(self) -> str:
        """The key that names this model's tokenizer and prepared data (utils.datafiles)."""
        return self.data_of or self.key

    @property
    def head_dim(self) -> int:
        return self.explicit_head_dim or self.hidden_size // self.num_attention_heads

    @property
    def size(self) -> str:
        return "tiny" if (self.proxy_of or self.variant).endswith("-tiny") else "full"

    @property
    def features(self) -> tuple[str, ...]:
        """Which of FEATURES the model has."""
        present = {"sliding_window": self.sliding_window is not None,
                   "alternating_window": self.full_attention_every is not None,
                   "attention_sinks": self.attention_sinks, "linear_bias": self.linear_bias,
                   "clamped_swiglu": self.swiglu_limit is not None,
                   "yarn": self.yarn}
        return tuple(name for name in FEATURES if present[name])

    @property
    def yarn(self) -> bool:
        """RoPE scaled by YaRN (GPT-OSS); other scaling is Llama 3's frequency scaling."""
        return self.rope_scaling.get("rope_type") == "yarn"

    def windowed(self, layer: int) -> bool:
        """Whether a layer (counted from 1) attends within the sliding window: every layer, or all but each
        full_attention_every-th (Megatron's window_attn_skip_freq, Hugging Face's layer_types)."""
        every = self.full_attention_every
        return self.sliding_window is not None and not (every and layer % every == 0)

    @property
    def windowed_layers(self) -> int:
        """How many layers attend within the sliding window."""
        return sum(self.windowed(layer) for layer in range(1, self.num_layers + 1))

    @property
    def megatron_window(self) -> tuple[int, int] | None:
        """The sliding window as megatron-core's and Transformer Engine's (left, right) window_size: a token sees
        itself and the sliding_window - 1 tokens before it, Hugging Face's meaning of sliding_window."""
        return None if self.sliding_window is None else (self.sliding_window - 1, 0)

    def _mlp_weights(self, active: bool) -> int:
        """One layer's MLP weights: the dense SwiGLU, or the MoE's (MoESpec.mlp_weights)."""
        if self.moe is None:
            return 3 * self.hidden_size * self.ffn_hidden_size
        return self.moe.mlp_weights(self.hidden_size, active)

    def _attention_weights(self) -> int:
        """One layer's QKV and output projections."""
        h, d = self.hidden_size, self.head_dim
        q_width, kv_width = self.num_attention_heads * d, self.num_kv_heads * d
        return h * (q_width + 2 * kv_width) + q_width * h

    def _biases(self, active: bool) -> int:
        """One layer's biases and attention sinks: QKV's (Qwen 2.5, GPT-OSS), and with linear_bias the output
        projection's, the router's (one per expert) and each MLP's (2 x its width for SwiGLU's fc1, hidden for fc2)."""
        h, d, moe = self.hidden_size, self.head_dim, self.moe
        qkv = (self.num_attention_heads + 2 * self.num_kv_heads) * d if self.qkv_bias or self.linear_bias else 0
        sinks = self.num_attention_heads if self.attention_sinks else 0
        if not self.linear_bias:
            return qkv + sinks
        if moe is None:
            mlp = 2 * self.ffn_hidden_size + h
        else:
            routed = moe.top_k if active else moe.num_experts
            mlp = (moe.num_experts + routed * (2 * moe.expert_ffn_size + h)
                   + moe.shared_experts * (2 * moe.shared_expert_ffn_size + h))
        return qkv + sinks + h + mlp

    def _param_count(self, active: bool) -> int:
        h, d = self.hidden_size, self.head_dim
        norms = 2 * h + (2 * d if self.qk_norm else 0)
        per_layer = self._attention_weights() + self._biases(active) + self._mlp_weights(active) + norms
        embeddings = (1 if self.tied_embeddings else 2) * self.vocab_size * h
        return self.num_layers * per_layer + embeddings + h

    def param_count(self) -> int:
        """Total parameters: the embedding and, when untied, the LM head; attention, the MLP (dense, or the router
        and every expert), RMSNorms (QK-norm's included), biases and attention sinks."""
        return self._param_count(active=False)

    def active_param_count(self) -> int:
        """The parameters one token passes through: param_count with only the top-k of a MoE's routed experts (the
        router and the shared experts included); a dense model's are all of them."""
        return self._param_count(active=True)

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (forward + backward), Megatron-LM's formula, causal attention.

        6 * [L * (QKV and output projections + MLP) + LM head] + 6 * L * (a*d) * s

        The MLP is the dense SwiGLU, or a MoE's active weights: router + top-k routed experts + shared experts.
        s stands for twice the keys a query sees on average (s/2, causal). A sliding window W < s caps them in the
        windowed layers: queries past the first W see W keys each, so the mean is W - W^2/(2s) and s becomes
        2W - W^2/s. Biases and attention sinks add no matrix multiply and are not counted.
        """
        h, q_width = self.hidden_size, self.num_attention_heads * self.head_dim
        dense = self.num_layers * (self._attention_weights() + self._mlp_weights(active=True))
        window, windowed = self.sliding_window, self.windowed_layers
        span = seq_len if window is None or seq_len <= window else 2 * window - window * window / seq_len
        attention = q_width * (windowed * span + (self.num_layers - windowed) * seq_len)
        return 6.0 * (dense + h * self.vocab_size) + 6.0 * attention

    def valid_tp(self, limit: int = 64) -> list[int]:
        """TP must divide the attention heads and the KV heads (a rank holds whole KV groups)."""
        return [t for t in range(1, limit + 1)
                if self.num_attention_heads % t == 0 and self.num_kv_heads % t == 0]

    def valid_pp(self) -> list[int]:
        """PP must divide the layer count."""
        return [p for p in range(1, self.num_layers + 1) if self.num_layers % p == 0]


LLAMA_31_8B = ModelSpec(
    key="llama", hf_family="llama", variant="llama3.1-8b", display_name="Llama 3.1 8B",
    hf_id="meta-llama/Llama-3.1-8B",
    num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32, num_kv_heads=8,
    vocab_size=128256, max_position_embeddings=131072, rope_theta=500000.0, norm_eps=1e-5,
    qkv_bias=False, gated=True,
    rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192},
)

QWEN_25_7B = ModelSpec(
    key="qwen", hf_family="qwen2", variant="qwen2.5-7b", display_name="Qwen 2.5 7B", hf_id="Qwen/Qwen2.5-7B",
    num_layers=28, hidden_size=3584, ffn_hidden_size=18944, num_attention_heads=28, num_kv_heads=4,
    vocab_size=152064, max_position_embeddings=131072, rope_theta=1000000.0, norm_eps=1e-6,
    qkv_bias=True,
)


LLAMA_31_70B = replace(
    LLAMA_31_8B, key="llama70b", variant="llama3.1-70b", display_name="Llama 3.1 70B",
    hf_id="meta-llama/Llama-3.1-70B", num_layers=80, hidden_size=8192, ffn_hidden_size=28672,
    num_attention_heads=64, num_kv_heads=8, data_of="llama",  # Llama 3.1's one tokenizer
)

LLAMA_32_3B = replace(
    LLAMA_31_8B, key="llama32", variant="llama3.2-3b", display_name="Llama 3.2 3B", hf_id="meta-llama/Llama-3.2-3B",
    num_layers=28, hidden_size=3072, ffn_hidden_size=8192, num_attention_heads=24, num_kv_heads=8,
    tied_embeddings=True, rope_scaling={**LLAMA_31_8B.rope_scaling, "factor": 32.0},
    data_of="llama",  # Llama 3's one tokenizer
)

MISTRAL_7B = ModelSpec(
    key="mistral", hf_family="mistral", variant="mistral-7b-v0.1", display_name="Mistral 7B v0.1",
    hf_id="mistralai/Mistral-7B-v0.1",
    num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32, num_kv_heads=8,
    vocab_size=32000, max_position_embeddings=32768, rope_theta=10000.0, norm_eps=1e-5,
    qkv_bias=False, gated=True, sliding_window=4096,
)

# Qwen3-30B-A3B: every number from Megatron-Bridge's provider, NVIDIA-NeMo/Megatron-Bridge commit 5ca1c1a1 (the last
# with it, 2026-03-31), src/megatron/bridge/models/qwen/qwen_provider.py lines 363-411 (Qwen3MoEModelProvider and
# Qwen3MoEModelProvider30B_A3B): 48 layers, hidden 2048, 32 heads, 4 query groups, kv_channels 128, dense FFN 6144,
# moe_ffn_hidden_size 768, 128 experts, top-8, no QKV bias, QK layernorm, vocab 151936, untied, eps 1e-6, rotary base
# 1e6, 40960 positions, aux_loss 1e-3, moe_router_pre_softmax False (= norm_topk_prob true). The same numbers in
# Hugging Face's names: tag v0.6.0, tests/unit_tests/models/qwen/test_qwen3_moe_bridge.py lines 34-61; Primus
# ca7ddda3 primus/configs/models/megatron/qwen3_30B_A3B.yaml. Qwen3's tokenizer is Qwen2's byte-level BPE with Qwen
# 2.5's ids for text and <|endoftext|>: it reads qwen's prepared data (docs/frameworks.md, "Models").
QWEN3_30B_A3B = ModelSpec(
    key="qwen3moe", hf_family="qwen3_moe", variant="qwen3-30b-a3b", display_name="Qwen3 30B-A3B",
    hf_id="Qwen/Qwen3-30B-A3B",
    num_layers=48, hidden_size=2048, ffn_hidden_size=6144, num_attention_heads=32, num_kv_heads=4,
    vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0, norm_eps=1e-6,
    qkv_bias=False, data_of="qwen", explicit_head_dim=128, qk_norm=True,
    moe=MoESpec(num_experts=128, top_k=8, expert_ffn_size=768, score_function="softmax", norm_topk_prob=True,
                load_balancing="aux_loss", aux_loss_coeff=1e-3),
)

# GPT-OSS-20B: torchtitan v0.3.0 torchtitan/models/gpt_oss/__init__.py lines 293-333 (_20b: 24 layers, hidden 2880,
# expert width 2880, 32 experts, top-4, vocab 201088, RoPE base 150000 with YaRN factor 32 over 4096 positions, beta
# fast 32, slow 1, untruncated, 131072 positions); transformers 5.23.0 models/gpt_oss/configuration_gpt_oss.py lines
# 53-76 and 84-86 (64 heads of 64, 8 KV heads, a 128-token window on odd layers and full attention on even ones, SwiGLU
# clamped at 7 with alpha 1.702, RMSNorm eps 1e-5, biases on attention, untied). Megatron-Bridge v0.6.0
# src/megatron/bridge/models/gpt_oss/gpt_oss_bridge.py lines 60-100 builds the same in megatron-core's names
# (add_bias_linear, softmax_type "learnable" for the sinks, window_attn_skip_freq 2, the clamp and a GLU offset of 1,
# yarn) with no load-balancing loss, as Primus's MLPerf GPT-OSS-20B config does (ca7ddda3, examples/megatron/configs/
# MI355X/gpt_oss_20B-FP8-mlperf-pretrain.yaml: moe_router_load_balancing_type none, moe_aux_loss_coeff 0.0).
GPT_OSS_20B = ModelSpec(
    key="gptoss", hf_family="gpt_oss", variant="gpt-oss-20b", display_name="GPT-OSS 20B", hf_id="openai/gpt-oss-20b",
    num_layers=24, hidden_size=2880, ffn_hidden_size=2880, num_attention_heads=64, num_kv_heads=8,
    vocab_size=201088, max_position_embeddings=131072, rope_theta=150000.0, norm_eps=1e-5, qkv_bias=True,
    rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                  "original_max_position_embeddings": 4096, "truncate": False},
    sliding_window=128, full_attention_every=2, explicit_head_dim=64, attention_sinks=True, linear_bias=True,
    swiglu_limit=7.0,
    moe=MoESpec(num_experts=32, top_k=4, expert_ffn_size=2880, score_function="softmax", norm_topk_prob=True,
                load_balancing="none", aux_loss_coeff=0.0),
)


def _tiny(spec: ModelSpec, **changes) -> ModelSpec:
    """Same family features and real vocabulary; 2 narrow layers so the CPU can train it in seconds."""
    return replace(spec, **{"variant": spec.variant + "-tiny", "display_name": spec.display_name + " (tiny)",
                             "num_layers": 2, "hidden_size": 128,
                             "num_attention_heads": 4, "num_kv_heads": 2, "max_position_embeddings": 4096,
                             **changes})


# Every model: its full spec and the changes that make its tiny variant (2 narrow layers: _tiny).
ENTRIES: tuple[tuple[ModelSpec, dict], ...] = (
    (LLAMA_31_8B, {"ffn_hidden_size": 448}),  # keeps Llama's 3.5x FFN ratio
    (QWEN_25_7B, {"ffn_hidden_size": 672}),  # keeps Qwen's ~5.3x FFN ratio
    (LLAMA_31_70B, {"ffn_hidden_size": 448, "num_attention_heads": 8}),  # 2x the 8B's heads, as at full size
    # 3.5x FFN; a window of 64 < the CPU's SL 128, so that it really cuts attention short there
    (MISTRAL_7B, {"ffn_hidden_size": 448, "sliding_window": 64}),
    (LLAMA_32_3B, {"ffn_hidden_size": 344}),  # keeps the 3B's 2.67x FFN ratio
    # heads twice hidden/heads wide and experts 0.375x hidden, as at full size; 8 experts, top-2
    (QWEN3_30B_A3B, {"ffn_hidden_size": 384, "explicit_head_dim": 64,
                     "moe": replace(QWEN3_30B_A3B.moe, num_experts=8, top_k=2, expert_ffn_size=48)}),
    # experts as wide as hidden, as at full size; 8 experts, top-2; a window of 32 < the CPU's SL, on layer 1 only
    (GPT_OSS_20B, {"ffn_hidden_size": 128, "sliding_window": 32,
                   "moe": replace(GPT_OSS_20B.moe, num_experts=8, top_k=2, expert_ffn_size=128)}),
)
MODELS: dict[tuple[str, str], ModelSpec] = {(spec.key, size): variant for spec, tiny in ENTRIES
                                             for size, variant in (("full", spec), ("tiny", _tiny(spec, **tiny)))}
MODEL_KEYS = tuple(spec.key for spec, _ in ENTRIES)
PROXY = re.compile(r"(?P<variant>.+)-L(?P<layers>[1-9][0-9]*)")  # "<variant>-L<N>": a proxy's variant


def get_model(key: str, size: str = "full", layers: int | None = None) -> ModelSpec:
    """The spec for a model key (MODEL_KEYS) and size ("full"/"tiny"); with `layers`, its proxy of that many
    layers at full width (all of them: the model itself)."""
    try:
        spec = MODELS[(key, size)]
    except KeyError:
        raise ValueError(f"unknown model {key!r} size {size!r}; models: {', '.join(MODEL_KEYS)}; "
                         f"sizes: {', '.join(MODEL_SIZES)}") from None
    if layers is None or layers == spec.num_layers:
        return spec
    if not 1 <= layers <= spec.num_layers:
        raise ValueError(f"{spec.display_name} has {spec.num_layers} layers: a proxy keeps 1 to {spec.num_layers}, "
                         f"not {layers}")
    return replace(spec, num_layers=layers, variant=f"{spec.variant}-L{layers}", proxy_of=spec.variant,
                   display_name=f"{spec.display_name} ({layers}-layer proxy)")


def by_variant(variant: str) -> ModelSpec:
    """The spec recorded in a result under its exact variant name, a proxy's ("llama3.1-70b-L8") included."""
    for spec in MODELS.values():
        if spec.variant == variant:
            return spec
    proxy = PROXY.fullmatch(variant)
    full = next((spec for spec in MODELS.values() if proxy and spec.variant == proxy["variant"]), None)
    if full is not None and int(proxy["layers"]) < full.num_layers:
        return get_model(full.key, full.size, int(proxy["layers"]))
    raise ValueError(f"unknown model variant {variant!r}; known: "
                     + ", ".join(s.variant for s in MODELS.values())
                     + ", and each one's proxy VARIANT-L<N> with N below its layer count")


def data_keys(keys: list[str]) -> list[str]:
    """The distinct models whose tokenizers and prepared data the given models use, in order."""
    return list(dict.fromkeys(get_model(key).data_key for key in keys))


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m utils.spec.models", description=__doc__.split("\n\n")[0])
    parser.add_argument("question", choices=("gated", "data-keys"),
                        help="gated: the gated tokenizers to fetch; data-keys: the distinct models whose data to "
                             "prepare, one a line")
    parser.add_argument("models", metavar="MODELS", help="comma list of " + ", ".join(MODEL_KEYS))
    args = parser.parse_args(argv)
    keys = [key.strip() for key in args.models.split(",") if key.strip()]
    unknown = [key for key in keys if key not in MODEL_KEYS]
    if unknown or not keys:
        parser.error(f"MODELS {args.models!r}: give a comma list of {', '.join(MODEL_KEYS)}")
    for spec in (get_model(key) for key in data_keys(keys)):
        if args.question == "data-keys":
            print(spec.key)
        elif spec.gated:
            print(f"{spec.key}\t{spec.hf_id}\t{spec.display_name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
