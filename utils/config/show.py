"""The configuration as the shell and a person read it: `export` lines and the effective table."""

from __future__ import annotations

import shlex

from utils.config.parse import shell_value
from utils.config.resolved import Config


def exports(config: Config) -> dict[str, str]:
    """Every knob resolved as the shell's text, plus the derived values the scripts need and the detection, so that
    the tools the scripts start do not ask the vendor tools again."""
    exported = {key: shell_value(value) for key, value in config.values.items()}
    exported.update({
        "STACK_NAME": config.stack.name,
        "STACK_IMAGE": config.stack.image or "",
        "FRAMEWORKS": ",".join(config.frameworks),
        "STRATEGIES": ",".join(config.strategies),
        "GBS": str(config.gbs),
        "NUM_GPUS": str(config.num_gpus),
        "TPRIMAT_DETECTED_PLATFORM": config.detected_platform,
        "TPRIMAT_DETECTED_GPUS": str(config.detected_gpus),
    })
    return exported


def shell_exports(config: Config) -> list[str]:
    """`export KEY=value` lines of exports()."""
    return [f"export {key}={shlex.quote(value)}" for key, value in exports(config).items()]


def describe(config: Config, secrets: dict[str, str]) -> list[str]:
    """The effective configuration as a table, with where each value came from; secrets masked."""
    lines = [f"{key:<26} {shell_value(value):<34} {config.sources.get(key, 'config.env')}"
             for key, value in config.values.items()]
    lines.append(f"{'HF_TOKEN':<26} {'(set, hidden)' if secrets.get('HF_TOKEN') else '(not set)':<34} "
                 "secrets.env or environment")
    lines.append("")
    stack = config.stack
    lines.append(f"platform {config.platform} ({config.detected_gpus} GPUs detected); stack {stack.name} "
                 f"({stack.image or 'the host .venv'}); frameworks {', '.join(config.frameworks)}; GBS {config.gbs}; GPUs {config.num_gpus}")
    for name in config.strategies:
        for spec in config.models:
            lay = config.layout(spec.key, name)
            lines.append(f"strategy {name}: {spec.variant}: {lay.label}")
    return lines
