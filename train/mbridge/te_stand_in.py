"""An inert answer to Megatron-Bridge's one unguarded Transformer Engine import, for a Python without Transformer
Engine: CI's build test (no CUDA to install it) and a GPU run with TRANSFORMER_IMPL=local (megatron-core's own
layers, where no Transformer Engine is installed).

megatron-core and most of Megatron-Bridge import Transformer Engine behind a guard, but
megatron.bridge.peft.lora_layers (reached through recipes/common.py's LoRA import; Megatron-Bridge 0.6.2) does not.
That one importer, and no other, is answered with a module whose every attribute is an inert class; every other
importer gets the ImportError a machine without Transformer Engine gives, so megatron-core still sees none. The
stand-in is taken out of sys.modules again once the recipes are imported, so nothing later sees a Transformer Engine.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import sys
import types

UNGUARDED_TE_IMPORTERS = ("megatron.bridge.peft.lora_layers",)


class _Inert(type):
    """A class whose every attribute is another inert class: enough for annotations and isinstance checks."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert(name, (), {})


class _StandIn:
    """Answers `import <package>...` for the named importers only."""

    def __init__(self, package: str, importers: tuple[str, ...]) -> None:
        self.package, self.importers = package, importers
        self.served: list[str] = []

    @staticmethod
    def _importer() -> str:
        frame = sys._getframe(1)
        while frame is not None:
            name = frame.f_globals.get("__name__", "")
            if not name.startswith(("importlib", "_frozen_importlib")) and name != __name__:
                return name
            frame = frame.f_back
        return ""

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] != self.package or self._importer() not in self.importers:
            return None
        self.served.append(name)
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = lambda name: _Inert.__getattr__(_Inert(self.package, (), {}), name)
        return module

    def exec_module(self, module) -> None:
        pass


@contextlib.contextmanager
def answering(package: str, importers: tuple[str, ...]):
    """An inert `package` for `importers` alone while the block runs, where the package is not installed; afterwards
    its modules leave sys.modules, so that nothing later sees it. Yields the list of module names it serves (none
    where the package is installed). train/mbridge/cpu_stand_ins.py answers a CPU run's other unguarded import so."""
    stand_in = _StandIn(package, importers)
    if importlib.util.find_spec(package) is not None:
        yield stand_in.served
        return
    sys.meta_path.insert(0, stand_in)
    try:
        yield stand_in.served
    finally:
        sys.meta_path.remove(stand_in)
        for name in [name for name in sys.modules if name.split(".")[0] == package]:
            del sys.modules[name]


@contextlib.contextmanager
def standing_in():
    """The Transformer Engine stand-in in front of the import system while the block runs (answering), where Transformer
    Engine is not installed. The probe imports megatron.bridge within it (the entry's probe_context), as the trainer
    does through import_recipes."""
    with answering("transformer_engine", UNGUARDED_TE_IMPORTERS) as served:
        yield served


def import_recipes(modules: set[str]) -> list[str]:
    """Import megatron.bridge.recipes.<module> for each module, with the stand-in in place for their unguarded import
    where Transformer Engine is not installed (before any other Megatron-Bridge import: the package's own __init__
    reaches that import); returns the module names it served (none where Transformer Engine is installed)."""
    with standing_in() as served:
        for module in sorted(modules):
            importlib.import_module(f"megatron.bridge.recipes.{module}")
    return sorted(set(served))
