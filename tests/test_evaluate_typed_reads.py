"""Readers in evaluate/ read a result through its typed shape (utils/spec/result_types.py), never by raw key lookups.

Every raw read of a result starts at one of its sections (`result["performance"]`, `result.get("telemetry")`), so a
lookup by a section's name is the mark of one. Only the modules that build a result before it exists, the judge that
writes it and the schema check that reads the JSON as written may look one up; a few names that sections share with
other documents are allowed where the document is named below.
"""

from __future__ import annotations

import ast
from pathlib import Path

from utils.spec.result import schema

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = frozenset(schema()["properties"])
BUILDERS = {  # path prefix under the repository -> why it may look sections up
    "evaluate/judge.py": "the one writer of result.json: it fills in the dict it writes",
    "evaluate/extract.py": "builds a result from a log's records and settings",
    "evaluate/trainer_account.py": "builds a result from a trainer's records",
    "evaluate/logs/": "log records and settings, before there is a result",
    "evaluate/collect.py": "the schema check, on the JSON as written, before it is typed",
}
OTHER_DOCUMENTS = {  # (path prefix, name) -> the document that has a field of that name
    **{("evaluate/history/", name): "a row of the history store (its columns)"
       for name in ("system", "stack", "framework", "platform", "schema_version")},
    ("evaluate/machine_checks.py", "health"): "system.json (Loaded.system), the run set's description",
    **{(module, name): "system.acceptance (Loaded.system): a GPU's memory figures and warning lines"
       for module in ("evaluate/acceptance_checks.py", "evaluate/comparison/acceptance.py")
       for name in ("memory", "warnings")},
}


def section_lookups(source: str) -> list[tuple[int, str]]:
    """(line, name) of every subscript or .get/.setdefault/.pop by a string constant naming a result section."""
    found = []
    for node in ast.walk(ast.parse(source)):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key = node.slice.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("get", "setdefault", "pop") and node.args
              and isinstance(node.args[0], ast.Constant)):
            key = node.args[0].value
        if isinstance(key, str) and key in SECTIONS:
            found.append((node.lineno, key))
    return found


def allowed(relative: str, name: str) -> bool:
    return any(relative.startswith(prefix) for prefix in BUILDERS) or \
        any(relative.startswith(prefix) and name == other for prefix, other in OTHER_DOCUMENTS)


def test_no_reader_in_evaluate_looks_a_result_section_up_by_key():
    raw = [f"{relative}:{line}: [{name!r}]" for path in sorted((ROOT / "evaluate").rglob("*.py"))
           for relative in [path.relative_to(ROOT).as_posix()]
           for line, name in section_lookups(path.read_text()) if not allowed(relative, name)]
    assert raw == [], "read the typed result (Loaded.typed, utils.spec.result_types.typed) instead:\n" + "\n".join(raw)


def test_the_rule_sees_each_form_of_a_raw_read():
    source = ("a = result['performance']['mfu']\nb = result.get('telemetry') or {}\n"
              "c = record['loss']\nd = result.typed.performance.mfu\n")
    assert section_lookups(source) == [(1, "performance"), (2, "telemetry")]


def test_every_allowance_names_a_module_that_exists():
    for prefix in [*BUILDERS, *(prefix for prefix, _ in OTHER_DOCUMENTS)]:
        assert (ROOT / prefix).exists(), prefix
