"""The command-line arguments of Megatron-LM's own pretrain_gpt.py for the workload of a TPrimat run, so that the GPU
check (bench/gpu_check.sh) trains the same model, batch, schedule, data and kernels with Megatron-LM's own loop
beside TPrimat's `mega`:

    python3 -m bench.megatron_lm_args RUN_DIR/config.json --megatron-lm DIR    # one argument per line on stdout

The request in Megatron-LM's argument names is Primus's mapping (train/prim/config.py `overrides`: Primus trains
through Megatron-LM's pretrain_gpt.py, so its names are pretrain_gpt.py's), plus what Primus takes from its shipped
experiment files for a Llama or Qwen model (ARCHITECTURE) and the layers TRANSFORMER_IMPL names. Megatron-LM's own
parser (megatron.training.arguments.add_megatron_arguments in the checkout DIR, with the installed megatron-core)
turns each setting into its option: a value equal to the parser's default is left out, True is the option that stores
True into that destination, False the one that stores False, a list its values. A setting the parser has no
destination for (a Primus-only key) is left out and named on stderr, so nothing is dropped silently.
Exit: 0 printed; 2 bad input (no request, no checkout, a model Megatron-LM would build otherwise).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from train.common import local_kernels
from train.prim.config import NotApplied, overrides
from utils.cli import Parser, UsageError
from utils.spec.request import Request, RequestError

# What Primus's shipped Llama and Qwen experiment files set and its overrides do not (the architecture TPrimat's
# specs share): RMSNorm, SwiGLU, rotary embeddings, no linear biases, no dropout.
ARCHITECTURE = {"normalization": "RMSNorm", "swiglu": True, "position_embedding_type": "rope",
                "add_bias_linear": False, "attention_dropout": 0.0, "hidden_dropout": 0.0}
# Primus's names that a newer Megatron-LM's parser spells otherwise (its network-size options are generated from
# megatron-core's TransformerConfig fields since 0.17), tried where the parser has no destination of the first name.
ALIASES = {"norm_epsilon": "layernorm_epsilon"}
# TransformerConfig switches Megatron-LM's parser holds as their negation: --no-persist-layer-norm stores True into
# no_persist_layer_norm (megatron/training/arguments.py:2802 at MEGATRON_LM_COMMIT), which argument_utils.py:304
# turns into persist_layer_norm.
NEGATED = {"persist_layer_norm": "no_persist_layer_norm"}


def settings(req: Request) -> dict:
    """The run's settings in Megatron-LM's argument names (destinations)."""
    impl = req.environment.transformer_impl
    found = {**overrides(req), **ARCHITECTURE, "transformer_impl": impl}
    if impl == "local":  # a kernel the table asks for stays on only where the stack has it, as in mega
        found.update({name: bool(found.get(name, True)) and have for name, have in local_kernels.available().items()})
    if req.model.qkv_bias:
        found["add_qkv_bias"] = True  # Qwen's QKV bias survives add_bias_linear=False as its own switch
    return found


def _option(action: argparse.Action) -> str:
    return next(o for o in action.option_strings if o.startswith("--"))


def arguments(values: dict, parser: argparse.ArgumentParser) -> tuple[list[str], list[str]]:
    """(the command-line arguments, the destinations the parser has no option for)."""
    by_dest: dict[str, list[argparse.Action]] = {}
    for action in parser._actions:  # argparse has no public listing of its actions
        if action.option_strings:
            by_dest.setdefault(action.dest, []).append(action)
    args, unknown = [], []
    for dest, value in values.items():
        if dest not in by_dest and dest in NEGATED and isinstance(value, bool):
            dest, value = NEGATED[dest], not value
        actions = by_dest.get(dest) or by_dest.get(ALIASES.get(dest, ""))
        if not actions:
            unknown.append(dest)
            continue
        if value is None or value == parser.get_default(actions[0].dest):
            continue
        if isinstance(value, bool):
            switch = [a for a in actions if a.nargs == 0 and a.const is value]
            if not switch:
                raise UsageError(f"Megatron-LM's parser has no option setting {dest} to {value}")
            args.append(_option(switch[0]))
            continue
        valued = [a for a in actions if a.nargs != 0][0]
        items = value if isinstance(value, (list, tuple)) else [value]
        if valued.type is int:  # a whole float (RoPE's base 500000.0) as the integer the option takes
            items = [int(item) if isinstance(item, float) and item.is_integer() else item for item in items]
        args += [_option(valued), *(str(item) for item in items)]
    return args, unknown


def megatron_parser(checkout: Path) -> argparse.ArgumentParser:
    """Megatron-LM's own argument parser, from the checkout (pretrain_gpt.py and megatron/training)."""
    if not (checkout / "pretrain_gpt.py").is_file():
        raise UsageError(f"--megatron-lm {checkout}: no pretrain_gpt.py there; fill it with bash bench/gpu_check.sh "
                         "--megatron-lm-from <a Megatron-LM git directory>")
    sys.path.insert(0, str(checkout))
    from megatron.training.arguments import add_megatron_arguments

    return add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m bench.megatron_lm_args", description=__doc__.split("\n\n")[0])
    parser.add_argument("request", type=Path, help="a run's config.json (the launcher's request)")
    parser.add_argument("--megatron-lm", type=Path, required=True, help="the Megatron-LM checkout (pretrain_gpt.py)")
    args = parser.parse_args(argv)
    try:  # stdout holds the arguments alone: what Megatron-LM's imports print (datasets' log lines) goes to stderr
        with contextlib.redirect_stdout(sys.stderr):
            req = Request.read(args.request)
            found, unknown = arguments(settings(req), megatron_parser(args.megatron_lm))
    except (RequestError, UsageError, NotApplied) as err:
        print(f"bench.megatron_lm_args: {err}", file=sys.stderr)
        return 2
    if unknown:
        print(f"bench.megatron_lm_args: not pretrain_gpt.py arguments, left out: {', '.join(sorted(unknown))}",
              file=sys.stderr)
    print("\n".join(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
