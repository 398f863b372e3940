"""The keys a Primus checkout's presets hold, read as Primus merges them, so that TPrimat refuses a key Primus lacks.

An experiment's `modules.pre_trainer` names a module preset (`config`, under primus/configs/modules/<framework>/)
and a model preset (`model`, under primus/configs/models/<framework>/). Each file may `extends` a list of files
beside it; Primus merges them in order, the file's own keys last (primus/core/config/yaml_loader.py, the same in
both releases), then merges module and model, and lays the experiment's `overrides` on top.
v25.11 stops on an override key neither preset holds; v26.5 deep-merges it in and its MegatronArgBuilder drops
what Megatron does not know, so a misspelt key is silently ignored. TPrimat checks every override key against the
presets of the checkout that will run, for both releases. Only key names are read: values keep their
${VAR:default} placeholders.
"""

from __future__ import annotations

from pathlib import Path


class PresetsMissing(FileNotFoundError):
    """The checkout has no preset the experiment names."""


def merged(path: Path) -> dict:
    """One preset with its `extends` chain merged as Primus merges it (top-level keys: the presets are flat)."""
    import yaml  # here, not at the top: the launcher's dry run plans with the standard library alone

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError:
        raise PresetsMissing(f"no Primus preset {path}") from None
    result: dict = {}
    for base in data.pop("extends", None) or ():
        result.update(merged(path.parent / base))
    result.update(data)
    return result


def preset_files(primus_path: Path, module: dict) -> tuple[Path, Path]:
    """The module's and the model's preset files in the checkout."""
    root = Path(primus_path) / "primus" / "configs"
    framework = module.get("framework", "megatron")
    return root / "modules" / framework / module["config"], root / "models" / framework / module["model"]


def accepted_keys(primus_path: Path, module: dict) -> frozenset[str]:
    """Every key the module's merged presets hold: what an override may set."""
    keys: set[str] = set()
    for path in preset_files(primus_path, module):
        keys.update(merged(path))
    return frozenset(keys)


def unknown_keys(primus_path: Path, module: dict) -> list[str]:
    """The module's override keys that its presets in this checkout do not hold, in the experiment's order."""
    accepted = accepted_keys(primus_path, module)
    return [key for key in module.get("overrides") or {} if key not in accepted]
