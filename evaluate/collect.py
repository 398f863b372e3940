"""Read results (and the system.json of their run set) from run directories, result files and zips.

A zip written by evaluate.wrap and the directory it was made from give the same results in the
same order: both are read as a tree of relative paths.

Every reader of results (compare, validate, the report) reads them here, and only results of the one shape get
through: a file that is not JSON, not a result (checked against utils/spec/result.schema.json) or written by a newer
TPrimat than this checkout knows is left out with one line naming it and its first problem (`Rejected`), and the
others are read on. The check is the schema's; a long series is checked on a sample that keeps every kind of
value it holds and its extremes (the schema limits series items only by type and minimum), so that a result of
200,000 steps is read in seconds, and the whole series only when the sample shows a problem, to name it.

Each result read from a run directory (a folder, a zip, or a lone result.json in its folder) carries its side files
(Loaded.beside: evals.jsonl, telemetry.jsonl, steps.jsonl, train.log, config.json, the other nodes' under nodeN/,
each rank's step times under rank_steps/), opened only when a check of validate recomputes a figure from them
(evaluate.telemetry_checks, evaluation_checks.log_points, evaluate.prediction_checks, evaluate.straggler_checks).
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path, PurePath, PurePosixPath
from typing import Any, BinaryIO, Callable, Sequence

from utils import run_files
from utils.cli import quoted, warn
from utils.files import MAX_JSON_BYTES, parse_json, read_bounded
from utils.spec.result import SCHEMA_VERSION, schema, schema_errors
from utils.spec.result_types import Section, typed
from utils.runset import SYSTEM_FILE

RESULT_NAME = run_files.RESULT
EVALS_NAME = run_files.EVALS
TELEMETRY_NAME, STEPS_NAME, LOG_NAME = run_files.TELEMETRY, run_files.STEPS, run_files.LOG
CONFIG_NAME = run_files.REQUEST  # evaluate.prediction_checks' evidence
SIDE_NAMES = (EVALS_NAME, TELEMETRY_NAME, STEPS_NAME, LOG_NAME, CONFIG_NAME)
RANK_STEPS = "rank_steps", "rank*.jsonl"  # utils.machine.stragglers' RUN_DIR/rank_steps/rank<R>.jsonl
SAMPLED_SERIES = 64  # a series longer than this is schema-checked on its sample first


@dataclass
class Loaded:
    """One result with where it came from."""

    where: str  # input and relative path, for messages
    result: dict
    system: dict  # the result's own system description, else the nearest system.json above it ({} when none)
    failures: list[str] = field(default_factory=list)  # validate's failed checks, "check: message" (evaluate.gate)
    evals: list[dict] | str | None = None  # the trainer's evals.jsonl beside it (evaluate.evaluation_checks' evidence),
    # its problem where it cannot be read, None where there is none
    beside: dict[str, Callable[[], BinaryIO]] | None = None  # the run directory's side files
    # (evaluate.telemetry_checks', evaluation_checks.log_points', prediction_checks' and straggler_checks' evidence),
    # path relative to it -> the file opened, when a check asks (a log is streamed, never held); None where the result
    # was not read from a run directory

    @cached_property
    def typed(self) -> Section:
        """The result as typed objects (utils.spec.result_types): what every reader in evaluate/ reads."""
        return typed(self.result)

    @property
    def name(self) -> str:
        """Input-independent name: platform/run id (e.g. nvd/mega-llama-r2), escaped for a terminal (it came from
        a file)."""
        return quoted(f"{self.typed.platform}/{self.typed.run.id}", 120)

    @property
    def overturned(self) -> bool:
        """The result says ok, but validate fails it (evaluate.gate): it counts as failed."""
        return bool(self.failures) and self.typed.run.status == "ok"

    @property
    def verdict(self) -> str:
        """How the run counts: its status, but "failed" where validate fails a result that says ok."""
        return "failed" if self.overturned else self.typed.run.status

    @property
    def ok(self) -> bool:
        """Whether the result may enter a figure, a ranking or a decision: status ok and every check passed."""
        return self.verdict == "ok"

    def identity(self) -> str:
        """What makes two results the same run: platform, run id, start and end, model, layout and workload, and
        its series (a copy edited only where no figure comes from is still the same run)."""
        result = self.typed
        return json.dumps([result.platform, result.run.id, result.run.started_at, result.run.ended_at,
                           *(section.as_dict() for section in (result.model, result.parallelism, result.training,
                                                               result.series))], sort_keys=True)

    @property
    def stack(self) -> str:
        """The stack it ran on (utils/spec/stacks.py); "-" when the result records none (extracted from a log
        without its request, or written before schema 1.5)."""
        return (self.typed.stack.name if self.typed.stack else None) or "-"

    @property
    def nodes(self) -> int | None:
        """Nodes the run used: its parallelism.nnodes (schema 1.1), else its system's node count; None unknown."""
        return self.typed.parallelism.nnodes or self.system.get("nodes")


class CollectError(Exception):
    """An input that cannot be read (one line, naming it)."""


@dataclass(frozen=True)
class Rejected:
    """A file read as a result that is none this checkout can use, and why."""

    where: str
    problem: str

    def line(self) -> str:
        return f"{quoted(self.where, 300)}: {self.problem}; left out"


@dataclass
class Collection:
    """What the inputs hold: the results, and the files left out."""

    results: list[Loaded]
    rejected: list[Rejected]
    duplicates: list[tuple[Loaded, Loaded]] = field(default_factory=list)  # (copy left out, the one counted)

    def duplicate_lines(self) -> list[str]:
        return [f"{quoted(copy.where, 300)}: the same run as {quoted(kept.where, 300)} ({kept.name}: same identity "
                "and step times); counted once" for copy, kept in self.duplicates]


def _version(text: Any) -> tuple[int, ...] | None:
    try:
        return tuple(int(part) for part in str(text).split("."))
    except ValueError:
        return None


def newer_schema(result: dict) -> str | None:
    """Why a result written by a newer TPrimat cannot be read here (a schema_version above the known ones)."""
    known = schema()["properties"]["schema_version"]["enum"]
    version = result.get("schema_version")
    mine = _version(SCHEMA_VERSION)
    if version in known or (theirs := _version(version)) is None or theirs <= mine:
        return None
    return (f"written by a newer TPrimat (result schema {quoted(str(version))}; this checkout reads "
            f"{known[0]} to {known[-1]}): update TPrimat to read it")


def _sample(values: list) -> list:
    """A series' values the schema would find fault with if any of the whole series has one: the first value of
    each JSON type, and the smallest and largest number."""
    firsts = {}
    for value in values:
        firsts.setdefault(type(value), value)
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return list(firsts.values()) + ([min(numbers), max(numbers)] if numbers else [])


def first_problem(result: Any) -> str | None:
    """The first reason a parsed JSON value is no result this checkout reads, or None."""
    if not isinstance(result, dict):
        return f"not a result (a JSON {type(result).__name__}, not an object)"
    if newer := newer_schema(result):
        return newer
    series = result.get("series")
    if isinstance(series, dict) and any(isinstance(v, list) and len(v) > SAMPLED_SERIES for v in series.values()):
        sampled = {**result, "series": {k: _sample(v) if isinstance(v, list) else v for k, v in series.items()}}
        if not schema_errors(sampled):
            return None
    errors = schema_errors(result)
    return f"not a TPrimat result ({len(errors)} problem(s), first: {quoted(errors[0])})" if errors else None


def _member(archive: zipfile.ZipFile, name: str) -> bytes:
    """A zip member's bytes, refused (ValueError) when it unpacks to more than any TPrimat file holds."""
    if archive.getinfo(name).file_size > MAX_JSON_BYTES:
        raise ValueError(f"unpacks to more than {MAX_JSON_BYTES >> 20} MiB, far more than any TPrimat file")
    return archive.read(name)


def _result(where: str, read, rejected: list[Rejected]) -> dict | None:
    """One result from read() (its bytes), or None with the reason in rejected."""
    try:
        value = parse_json(read())
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        rejected.append(Rejected(where, str(err) if isinstance(err, ValueError) else f"cannot be read ({err})"))
        return None
    problem = first_problem(value)
    if problem:
        rejected.append(Rejected(where, problem))
        return None
    return value


def _system(where: str, data: bytes) -> dict:
    """A run set's system.json; {} (said) when it is not a JSON object: its results are still worth reading."""
    try:
        value = parse_json(data)
    except ValueError as err:
        value = err
    if isinstance(value, dict):
        return value
    warn(f"{where}: {value if isinstance(value, ValueError) else 'not a JSON object'}; "
         "its results are read without a system description")
    return {}


def collect(inputs: Sequence[str | Path]) -> Collection:
    """Every result under the inputs (directories, output.zip files, or result JSON files), in order, and the
    files left out; CollectError for an input that does not exist."""
    loaded: list[Loaded] = []
    rejected: list[Rejected] = []
    for item in map(Path, inputs):
        if not item.exists():
            raise CollectError(f"{item}: no such file or directory")
        if item.is_file() and zipfile.is_zipfile(item):
            with zipfile.ZipFile(item) as archive:
                names = [n for n in sorted(archive.namelist())
                         if PurePosixPath(n).name in (RESULT_NAME, SYSTEM_FILE) or _side(PurePosixPath(n))]
            _read_tree(str(item), {PurePosixPath(n): (lambda n=n: _reopened(item, n)) for n in names}, loaded,
                       rejected, lambda n: _streamed(item, str(n)))
        elif item.is_dir():
            paths = [p for p in sorted(item.rglob("*")) if (p.name in (RESULT_NAME, SYSTEM_FILE) or _side(p))
                     and p.is_file()]
            _read_tree(str(item), {PurePosixPath(p.relative_to(item).as_posix()): (lambda p=p: read_bounded(p))
                                   for p in paths}, loaded, rejected, lambda n, root=item: open(root / n, "rb"))
        elif (result := _result(str(item), lambda: read_bounded(item), rejected)) is not None:  # a single result
            beside = item.parent / EVALS_NAME
            loaded.append(Loaded(str(item), result, result.get("system") or {},
                                 evals=_evals(lambda: read_bounded(beside)) if beside.is_file() else None,
                                 beside={p.relative_to(item.parent).as_posix(): (lambda p=p: open(p, "rb"))
                                         for p in _side_files(item.parent)}))
    return _once(loaded, rejected)


def _once(loaded: list[Loaded], rejected: list[Rejected]) -> Collection:
    """The collection with each run counted once: a copy (cp -a RUN RUN.bak, a run set reached through two inputs)
    is the same run, not a repeat, and is named as a duplicate."""
    first: dict[str, Loaded] = {}
    kept, duplicates = [], []
    for item in loaded:
        key = item.identity()
        if key in first:
            duplicates.append((item, first[key]))
        else:
            first[key] = item
            kept.append(item)
    return Collection(kept, rejected, duplicates)


def _read_tree(source: str, tree: dict, loaded: list[Loaded], rejected: list[Rejected],
               opened: Callable[[PurePosixPath], BinaryIO]) -> None:
    """The results of one directory or zip (relative path -> its bytes' reader; opened: a path of it opened), each
    with its nearest system and its side files."""
    systems = {}
    for path, read in tree.items():
        if path.name == SYSTEM_FILE:
            try:
                systems[path.parent] = _system(f"{source}:{path}", read())
            except (OSError, ValueError, zipfile.BadZipFile) as err:
                warn(f"{source}:{path}: cannot be read ({err}); its results are read without a system description")
    for path, read in tree.items():
        if path.name != RESULT_NAME:
            continue
        result = _result(f"{source}:{path}", read, rejected)
        if result is not None:
            nearest = next((systems[parent] for parent in path.parents if parent in systems), {})
            evals = tree.get(path.parent / EVALS_NAME)
            loaded.append(Loaded(f"{source}:{path}", result, result.get("system") or nearest,
                                 evals=None if evals is None else _evals(evals), beside=_beside(path, tree, opened)))


def _side_files(run_dir: Path) -> list[Path]:
    """A lone result's run directory's side files: its own and its other nodes' (nodeN/)."""
    return [p for p in [*run_dir.glob("*"), *run_dir.glob("node*/*"), *run_dir.glob("/".join(RANK_STEPS))]
            if _side(p) and p.is_file()]


def _side(path: PurePath) -> bool:
    """A side file by its name: one of SIDE_NAMES, or a rank's step times (RANK_STEPS)."""
    return path.name in SIDE_NAMES or (path.parent.name == RANK_STEPS[0] and path.match(RANK_STEPS[1]))


def _beside(path: PurePosixPath, tree: dict, opened: Callable[[PurePosixPath], BinaryIO]
            ) -> dict[str, Callable[[], BinaryIO]]:
    """The side files of the result at path (its run directory's, its nodes' nodeN/ and its rank_steps/), relative to
    its folder."""
    out = {}
    for other in tree:
        if _side(other) and path.parent in other.parents:
            relative = other.relative_to(path.parent)
            if len(relative.parts) == 1 or (len(relative.parts) == 2 and (relative.parts[0].startswith("node")
                                                                         or relative.parts[0] == RANK_STEPS[0])):
                out[relative.as_posix()] = lambda other=other: opened(other)
    return out


def _streamed(archive_path: Path, name: str) -> BinaryIO:
    """A zip member opened for a check to stream (a log may be larger than any JSON file TPrimat writes); the member
    keeps the zip's file open until it is closed itself."""
    archive = zipfile.ZipFile(archive_path)
    member = archive.open(name)
    archive.close()
    return member


def _reopened(archive_path: Path, name: str) -> bytes:
    """A zip member's bytes, the zip opened again: side files are read when a check asks, after collect()."""
    with zipfile.ZipFile(archive_path) as archive:
        return _member(archive, name)


def _evals(read) -> list[dict] | str:
    """evals.jsonl's points (one JSON object a line), or why they cannot be read (then said by validate)."""
    try:
        lines = [parse_json(line) for line in read().splitlines() if line.strip()]
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        return f"{EVALS_NAME} cannot be read: {err}"
    if not all(isinstance(line, dict) for line in lines):
        return f"{EVALS_NAME} holds a line that is no JSON object"
    return lines


def load(inputs: Sequence[str | Path]) -> list[Loaded]:
    """The results collect() finds, each file left out said in one warning line."""
    found = collect(inputs)
    for item in found.rejected:
        warn(item.line())
    for line in found.duplicate_lines():
        warn(line)
    return found.results
