"""The house's shape: utils/ is the domain core, and data/, train/ and evaluate/ meet only through it; bench/ (the
self-benchmarks) sits above them all and nothing imports it.

A stage that needs another stage's work runs it as a command (the launcher runs `python3 -m evaluate.judge`),
never imports it, so each stage can be read, tested and replaced on its own. Files stay small enough to
read top to bottom.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STAGES = ("data", "train", "evaluate")
CORE = "utils"
BENCHMARKS = "bench"
LINE_LIMIT = 400  # "about 400 lines": one job per file


def imported_packages(path: Path) -> set[str]:
    """The top-level packages a module imports anywhere (at the top or inside a function)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", STAGES)
def test_a_stage_imports_no_other_stage(package):
    others = set(STAGES) - {package}
    crossings = {str(path.relative_to(ROOT)): sorted(imported_packages(path) & others) for path in modules(package)}
    assert {path: found for path, found in crossings.items() if found} == {}


def test_the_core_imports_no_stage():
    crossings = {str(path.relative_to(ROOT)): sorted(imported_packages(path) & set(STAGES))
                 for path in modules(CORE)}
    assert {path: found for path, found in crossings.items() if found} == {}


def test_nothing_imports_the_benchmarks():
    importers = [str(path.relative_to(ROOT)) for package in (*STAGES, CORE) for path in modules(package)
                 if BENCHMARKS in imported_packages(path)]
    assert importers == []


def test_no_source_file_is_over_the_line_limit():
    sources = [path for folder in (*STAGES, CORE, BENCHMARKS, "shell", "tests") for pattern in ("*.py", "*.sh")
               for path in (ROOT / folder).rglob(pattern) if ".venv" not in path.parts]
    long = {str(path.relative_to(ROOT)): n for path in sources if (n := len(path.read_text().splitlines())) > LINE_LIMIT}
    assert long == {}


@pytest.mark.parametrize("trainer", ["train/train_mega.py", "train/train_fsdp.py", "train/train_autotp.py"])
def test_a_trainer_run_as_a_script_keeps_train_off_the_import_path(trainer):
    """torchrun starts the trainers as scripts, which puts their folder first on sys.path: train/'s subpackages (nemo/)
    would then shadow the frameworks' own packages of the same name."""
    probe = ("import runpy, sys; from pathlib import Path; sys.path.insert(0, 'train'); "
             "runpy.run_path(sys.argv[1], run_name='probe'); "
             "print([p for p in sys.path if Path(p or '.').resolve() == Path('train').resolve()])")
    out = subprocess.run([sys.executable, "-c", probe, trainer], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


UTILS_TOP_LEVEL_LIMIT = 12  # utils/ keeps its domains in subpackages; its top holds only the helpers every tool uses


def test_utils_keeps_its_domains_in_subpackages():
    top = sorted(path.name for path in (ROOT / CORE).glob("*.py"))
    assert len(top) <= UTILS_TOP_LEVEL_LIMIT, top


def test_only_the_mega_framework_imports_its_folder():
    """Common code (train/common, the native trainer, the launcher) never depends on one framework's folder: only the
    framework's own entry point (train/train_mega.py) and the benchmark of its trainer (bench/) import train.mega."""
    own = {ROOT / "train" / "train_mega.py"}
    mega = ROOT / "train" / "mega"
    importers = [str(path.relative_to(ROOT)) for package in (*STAGES, CORE) for path in modules(package)
                 if mega not in path.parents and path not in own and "train.mega" in imported_modules(path)]
    assert importers == []


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """The project modules a module imports anywhere but under `if TYPE_CHECKING:`, each as the module itself
    (`from utils.spec import models` is utils.spec.models, `from utils.spec.models import get_model` is
    utils.spec.models) and the package prefixes of its name (train.mega for train.mega.model)."""
    tree = ast.parse(path.read_text(), str(path))
    checking = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                and getattr(block.test, "id", getattr(block.test, "attr", "")) == "TYPE_CHECKING"
                for statement in block.body for node in ast.walk(statement)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in checking:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    project = {module_name(p) for package in (*STAGES, CORE, BENCHMARKS) for p in modules(package)}
    with_prefixes = {".".join(name.split(".")[:n]) for name in found for n in range(1, name.count(".") + 2)}
    return with_prefixes & project


def test_no_import_cycle_between_modules():
    """A cycle dodged by an import inside a function is still a cycle: modules that need each other are one job
    split in two. Only imports under `if TYPE_CHECKING:` are left out. A package's own __init__ importing its
    children is not an edge back from them."""
    paths = [p for package in (*STAGES, CORE, BENCHMARKS) for p in modules(package)]
    graph = {module_name(p): {m for m in imported_modules(p) if not module_name(p).startswith(m + ".")}
             - {module_name(p)} for p in paths}
    for name, targets in graph.items():  # a package's __init__ does not import back the children it collects
        if (ROOT / name.replace(".", "/") / "__init__.py").exists():
            graph[name] = {t for t in targets if not t.startswith(name + ".")}
    cycles, state = [], {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                cycles.append(trail[trail.index(target):] + [target])
            elif target not in state:
                visit(target, trail + [target])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_importing_utils_changes_no_global_state():
    """The exception hook is the entry points' to install (utils.cli.install_excepthook), not an import's."""
    probe = "import sys; hook = sys.excepthook; import utils, utils.cli, utils.config; print(sys.excepthook is hook)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stderr
