"""The documentation keeps its word: every file it names exists, every link lands, every `python3 -m` module it names
is one, every command it names answers --help, and the README stays a short front door to every docs/ page.

The pages are README.md, docs/*.md and bench/README.md. A file is named in backticks (`train/launch.sh`) and is
checked when it has a folder and a file's ending (.py, .sh, .md, .txt, .json, .env, Dockerfile), or is one of the
top-level files (config.env, secrets.env.example, amd.Dockerfile, nvd.Dockerfile). Examples and placeholders are
not files of the repository, by one rule: a path holding `<`, `*`, `{`, `$` or `...`, an absolute or home path, a
path under a knob's folder (spelt in capitals: DATA_DIR/, RUN_DIR/) or under output/ (what runs write), and
another project's file (Megatron-LM's tools/, Primus's examples/ and primus/).

The source's prose keeps its word too: every repository path (one that starts with a folder of the repository,
`train/launch/run.py`, `utils/spec/`, `train/nemo/recipe`, or is a top-level file) and every project module
(`utils.spec.models`, or a name it defines: `train.plan.skip_reason`, `train/plan.request`) named in a comment or
docstring of bench/, data/, evaluate/, train/ and utils/, in a comment of the shell scripts, config.env and the
Dockerfiles, or on any line of a Markdown page, exists. A name followed by a placeholder or glob
(`bench/<name>.py`, `train/train_{platform}`), an elision, a path inside another (RUN_DIR/..., output/...,
megatron/core/...), a file name (`train.log`), a module spelt in capitals (`bench.NAME`) and the few paths of
other projects that start like ours (NOT_OURS) are not names.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import io
import os
import re
import subprocess
import sys
import tokenize
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]
README_LINE_LIMIT = 220

FILE_ENDINGS = (".py", ".sh", ".md", ".txt", ".json", ".env", "Dockerfile")
TOP_LEVEL_FILES = {"config.env", "secrets.env.example", "amd.Dockerfile", "nvd.Dockerfile"}
PLACEHOLDER_MARKS = ("<", "*", "{", "$", "...")
WRITTEN_BY_RUNS = "output"
# Megatron-LM's tools/, Primus's examples/ and primus/, torchtitan's package and benchmarks/
OTHER_PROJECTS = {"tools", "examples", "primus", "torchtitan", "benchmarks"}

HELP_TIMEOUT_S = 60


def text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def code_spans(page_text: str) -> list[str]:
    """The contents of every fenced block and every inline `code` span."""
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", page_text, flags=re.S | re.M)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", page_text, flags=re.S | re.M)
    return fenced + re.findall(r"`([^`\n]+)`", prose)


def is_repository_file(token: str) -> bool:
    if token in TOP_LEVEL_FILES:
        return True
    if "/" not in token or not token.endswith(FILE_ENDINGS):
        return False
    if any(mark in token for mark in PLACEHOLDER_MARKS) or token.startswith(("/", "~")):
        return False
    first = token.removeprefix("./").split("/")[0]
    return not (first.isupper() or first == WRITTEN_BY_RUNS or first in OTHER_PROJECTS)


def named_files(page: Path) -> set[str]:
    tokens = (token.strip(".,:;()[]'\"") for span in code_spans(text(page)) for token in re.split(r"[\s=]+", span))
    return {token.removeprefix("./") for token in tokens if is_repository_file(token)}


def links(page: Path) -> list[str]:
    """Markdown link targets that are not web addresses."""
    return [target for target in re.findall(r"\]\(([^)\s]+)\)", text(page)) if "://" not in target]


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces turned into hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {anchor(heading) for heading in re.findall(r"^#+ (.+)$", text(page), flags=re.M)}


def modules() -> list[str]:
    """Every module named after `python3 -m` or torchrun's `-m` (one spelt in capitals, bench.NAME, is a
    placeholder)."""
    found = {name for page in PAGES for name in re.findall(r"(?:python3|torchrun[^`\n]*?) -m ([\w.]+)", text(page))}
    return sorted(name.rstrip(".") for name in found if name.islower())


def help_commands() -> list[tuple[str, ...]]:
    """The distinct commands to ask for --help: each `python3 -m` module and each script run as ./shell/NAME.sh or
    bash PATH.sh (torchrun forms are left out: they start workers)."""
    every = "\n".join(text(page) for page in PAGES)
    python = {(sys.executable, "-m", name.rstrip("."))
              for name in re.findall(r"python3 -m ([\w.]+)", every) if name.islower()}
    shell = {(f"shell/{name}.sh",) for name in re.findall(r"\./shell/(\w+)\.sh", every)}
    bash = {("bash", path) for path in re.findall(r"\bbash ([\w/]+\.sh)", every) if (ROOT / path).is_file()}
    return sorted(python | shell | bash)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_file_a_page_names_exists(page):
    assert sorted(path for path in named_files(page) if not (ROOT / path).exists()) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_link_lands_on_a_file_and_heading(page):
    broken = []
    for target in links(page):
        path, _, heading = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists() or (heading and heading not in anchors(destination)):
            broken.append(target)
    assert broken == []


@pytest.mark.parametrize("module", modules())
def test_every_module_named_is_one(module):
    assert importlib.util.find_spec(module) is not None


@pytest.fixture(scope="module")
def help_answers() -> dict[tuple[str, ...], subprocess.CompletedProcess]:
    """Every command's --help, run from the repository root without the network, a few at a time."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}

    def ask(command: tuple[str, ...]) -> subprocess.CompletedProcess:
        try:
            return subprocess.run([*command, "--help"], cwd=ROOT, env=env, capture_output=True, text=True,
                                  timeout=HELP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(command, 124, "", f"no answer within {HELP_TIMEOUT_S} s")

    commands = help_commands()
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(commands, pool.map(ask, commands)))


def spelt(command: tuple[str, ...]) -> str:
    return " ".join("python3" if part == sys.executable else part for part in command)


@pytest.mark.parametrize("command", help_commands(), ids=spelt)
def test_every_command_named_answers_help(command, help_answers):
    answer = help_answers[command]
    assert answer.returncode == 0, answer.stderr[-2000:]


def test_the_readme_is_a_short_front_door():
    assert len(text(README).splitlines()) <= README_LINE_LIMIT


def test_the_readme_links_every_docs_page():
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in links(README)}
    assert sorted(page.name for page in (ROOT / "docs").glob("*.md") if page.resolve() not in linked) == []


# --- Enumerations the pages and config.env spell out are the registries' ------------------------------------------

COUNT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven")


def first_paragraph(page: Path) -> str:
    """A page's opening prose (after its title), joined into one line."""
    return " ".join(text(page).split("\n\n")[1].split())


@pytest.mark.parametrize("page", ["README.md", "docs/frameworks.md"])
def test_the_opening_names_every_framework_and_counts_them(page):
    """README's opening and the frameworks page's name each registered framework in backticks, and count them right:
    a new registry entry that these pages do not tell fails here."""
    from utils import frameworks

    opening = first_paragraph(ROOT / page)
    assert [name for name in frameworks.NAMES if f"`{name}`" not in opening] == []
    assert f"{COUNT_WORDS[len(frameworks.NAMES)]} frameworks" in opening.lower()


def test_the_readme_opening_names_every_model():
    from utils.spec.models import MODEL_KEYS, get_model

    opening = first_paragraph(README)
    assert [key for key in MODEL_KEYS if get_model(key).display_name not in opening] == []


def test_config_env_lists_each_enumerated_knob_s_values():
    """An enum or list knob whose comment opens with its values (`bf16|fp8|...`) lists exactly those its rule
    accepts."""
    from utils.config import CONFIG_FILE, KNOBS

    told = {}
    for line in CONFIG_FILE.read_text().splitlines():
        name, _, rest = line.partition("=")
        comment = rest.partition(" # ")[2].split()
        if name in KNOBS and KNOBS[name].kind in ("enum", "list") and comment and "|" in comment[0]:
            told[name] = set(comment[0].rstrip(":").split("|"))
    assert {name: sorted(values) for name, values in told.items() if values != set(KNOBS[name].choices) - {""}} == {}


@pytest.mark.parametrize("script", ["shell/run_train.sh", "shell/run_data.sh"])
def test_an_entry_points_header_lists_each_knob_s_values(script):
    """A knob the header of a command users type shows with its values (`#   PLATFORM=amd|nvd|cpu ...`,
    `#   FRAMEWORK   mega|...`) shows those its rule accepts: a list knob all of them, an enum all but its
    automatic default."""
    from utils.config import KNOBS

    told = {}
    for line in (ROOT / script).read_text().splitlines():
        found = re.match(r"#   ([A-Z_]+)(?:=|\s+)(\S*\|\S*)", line)
        if found and found.group(1) in KNOBS:
            told[found.group(1)] = set(found.group(2).split("|"))
    wrong = {name: sorted(values) for name, values in told.items()
             if values != set(KNOBS[name].choices) - ({"auto"} if KNOBS[name].kind == "enum" else set())}
    assert wrong == {}


# --- Names the source and the docs give: every repository path and project module they name exists -------------

REPOSITORY_FOLDERS = ("bench", "data", "docs", "evaluate", "requirements", "shell", "tests", "train", "utils")
PACKAGES = ("bench", "data", "evaluate", "train", "utils")
SHELL_LIKE = [*sorted(ROOT.glob("shell/**/*.sh")), *sorted(ROOT.glob("train/*.sh")), ROOT / "config.env",
              ROOT / "secrets.env.example", *sorted(ROOT.glob("*.Dockerfile"))]
MARKDOWN = [*PAGES, *sorted(page for folder in (*PACKAGES, "tests") for page in (ROOT / folder).rglob("*.md")
                            if page not in PAGES)]
NOT_OURS = ("docs/source/", "tests/testdata", "tests/unit_tests/")  # Megatron-LM's docs/source/, the Brotli release's
# tests/testdata, Megatron-Bridge's tests/unit_tests/
FILE_SUFFIXES = {"py", "sh", "md", "log", "json", "jsonl", "txt", "env", "yaml", "yml", "csv", "png", "zip", "gz",
                 "bin", "idx"}
NAME = re.compile(r"(?<![\w./$-])(?:\./)?(?:(?P<path>(?:{folders})/[\w./-]*)|(?P<module>(?:{packages})(?:\.\w+)+)"
                  r"|(?P<top>[\w-]+\.Dockerfile|Dockerfile\.\w+|[\w-]+\.env\.example))"
                  .format(folders="|".join(REPOSITORY_FOLDERS), packages="|".join(PACKAGES)))
PLACEHOLDER_FOLLOWS = tuple("<>*{}$")


def python_prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of a Python file's comments and of the lines of its docstrings (every bare string statement)."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    comments = [(token.start[0], token.string) for token in tokenize.generate_tokens(io.StringIO(source).readline)
                if token.type == tokenize.COMMENT]
    strings = [(number, lines[number - 1]) for node in ast.walk(ast.parse(source, str(path)))
               if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
               and isinstance(node.value.value, str) for number in range(node.lineno, node.end_lineno + 1)]
    return comments + strings


def shell_comments(path: Path) -> list[tuple[int, str]]:
    return [(number, found.group(1)) for number, line in enumerate(text(path).splitlines(), 1)
            if (found := re.search(r"(?:^|\s)(#.*)$", line))]


def prose() -> list[tuple[Path, int, str]]:
    """Every line of text that names things: the Python sources' comments and docstrings, the shell scripts' (and
    the configuration's and Dockerfiles') comments, and every line of the Markdown docs."""
    python = [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
    return ([(path, number, line) for path in python for number, line in python_prose(path)]
            + [(path, number, line) for path in SHELL_LIKE if path.is_file() for number, line in shell_comments(path)]
            + [(path, number, line) for path in MARKDOWN for number, line in enumerate(text(path).splitlines(), 1)])


def names(line: str) -> list[tuple[str, str]]:
    """The (kind, name) of each repository path, project module and top-level file a line names ("path",
    "module" or "top"); placeholders, globs, elisions and other projects' paths are not names."""
    found = []
    for match in NAME.finditer(line):
        name = match.group(match.lastgroup).rstrip(".")
        if line[match.end():].startswith(PLACEHOLDER_FOLLOWS) or "..." in match.group(0):
            continue
        if match.lastgroup == "path" and name.startswith(NOT_OURS):
            continue
        if match.lastgroup == "module":
            *prefix, last = name.split(".")
            if last in FILE_SUFFIXES or (last.isupper() and ROOT.joinpath(*prefix).is_dir()):
                continue  # a file (train.log, data.md), or a module's name spelt as a placeholder (bench.NAME)
        found.append((match.lastgroup, name))
    return found


@functools.cache
def defined(source: Path) -> dict[str, ast.AST | None]:
    """The names a module defines at its top level (under if/try too), each with its class body when it is one."""
    found: dict[str, ast.AST | None] = {}

    def visit(statements):
        for node in statements:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found[node.name] = node if isinstance(node, ast.ClassDef) else None
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found.update((name.id, None) for target in targets for name in ast.walk(target)
                             if isinstance(name, ast.Name))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                found.update(((alias.asname or alias.name).split(".")[0], None) for alias in node.names)
            for field in ("body", "orelse", "finalbody", "handlers"):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    visit(getattr(node, field, []))

    visit(ast.parse(source.read_text(encoding="utf-8"), str(source)).body)
    return found


def has_attributes(source: Path, attributes: list[str]) -> bool:
    """A module defines attributes[0]; when that is a class, the class defines attributes[1] (deeper is not
    checked)."""
    if not attributes:
        return True
    if attributes[0] not in defined(source):
        return False
    body = defined(source)[attributes[0]]
    if body is None or len(attributes) == 1:
        return True
    members = {node.name for node in body.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    members |= {name.id for node in body.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                for name in ast.walk(target) if isinstance(name, ast.Name)}
    return attributes[1] in members


def module_source(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    for source in (base.parent / f"{base.name}.py", base / "__init__.py"):
        if source.is_file():
            return source
    return None


def exists(kind: str, name: str) -> bool:
    """A path or top-level file exists as named or as a module (train/nemo/recipe), or is a module's attribute
    (train/plan.request); a module's longest prefix that is one defines the rest (utils.spec.models.get_model)."""
    if kind != "module":
        if (ROOT / name).exists() or (ROOT / f"{name}.py").is_file():
            return True
        folder, _, last = name.rpartition("/")
        stem, dot, attributes = last.partition(".")
        source = ROOT / folder / f"{stem}.py"
        return bool(dot) and source.is_file() and has_attributes(source, attributes.split("."))
    parts = name.split(".")
    for size in range(len(parts), 0, -1):
        if (source := module_source(parts[:size])) is not None:
            return has_attributes(source, parts[size:])
    return False


def test_every_path_and_module_the_source_and_docs_name_exists():
    missing = [f"{path.relative_to(ROOT)}:{number} names {name}" for path, number, line in prose()
               for kind, name in names(line) if not exists(kind, name)]
    assert not missing, "\n".join(missing)


def test_names_are_told_from_placeholders_and_other_projects():
    line = ("train/nemo_recipe.RECIPES, train.plan.skip_reason, `./shell/lib.sh`, train/train_<platform>_x.sh, "
            "bench/<name>.py, RUN_DIR/train.log, megatron/core/utils.py, torch.utils.data, bench.NAME, train.log, "
            "utils/.../x.py, Megatron-LM docs/source/api-guide/, utils.spec.models.ModelSpec.nothing")
    found = names(line)
    assert found == [("path", "train/nemo_recipe.RECIPES"), ("module", "train.plan.skip_reason"),
                     ("path", "shell/lib.sh"), ("module", "utils.spec.models.ModelSpec.nothing")]
    assert [exists(*name) for name in found] == [False, True, True, False]
