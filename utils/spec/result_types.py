"""The result as typed objects: every object of utils/spec/result.schema.json that names its properties is a frozen
dataclass made from the schema, so a reader writes `result.performance.mfu`, not `result["performance"]["mfu"]`.

Why from the schema: the schema is the one description of the shape (utils.spec.result writes and validates against
it), so a field added there is a field here, and a name the schema does not have is an AttributeError at the first
read instead of a None that hides a typo. A property the schema lists but a result leaves out reads as None (an older
result, a run without that section). What the schema leaves free-form (system.gpu, raw_framework, features, the
platform environment) is a read-only Mapping: those are tables of names, not shape. An object that allows
properties beyond those it names (system, effective, stragglers) keeps them in `extra`, a read-only Mapping
(effective's read-back settings: `result.effective.extra.get("tp")`).

    typed(result_dict) -> Result     # a dict already checked against the schema (evaluate.collect does)
    load(path) -> Result             # read, check against the schema, type; ResultError naming the first problem

Arrays are tuples; the objects are frozen, so a reader cannot change what another reads. The judge, the one writer,
builds the plain dict and types it for its checks.
"""

from __future__ import annotations

import dataclasses
import os
from functools import lru_cache
from types import MappingProxyType
from typing import Any, Mapping

from utils.spec.result import ResultError, load_result, schema, schema_errors

EXTRA = "extra"  # the field of an open object's properties the schema does not name


class Section:
    """Base of every typed object of the result (isinstance checks; the fields are the schema's)."""

    def as_dict(self) -> dict:
        """The plain JSON value again (for a copy written out, or a fingerprint of the section)."""
        return _plain(self)

    def holds(self, name: str) -> bool:
        """Whether the result holds the field, a null included: an absent field reads as None too, and a check that
        tells "not recorded" from "recorded as none" asks here."""
        return name in self._present or name in getattr(self, EXTRA, {})


def _plain(value: Any) -> Any:
    if isinstance(value, Section):
        out = {}
        for item in dataclasses.fields(value):
            if item.name == "_present":
                continue
            if item.name == EXTRA:
                out.update({key: _plain(v) for key, v in getattr(value, EXTRA).items()})
            elif (found := getattr(value, item.name)) is not None or item.name in value._present:
                out[item.name] = _plain(found)
        return out
    if isinstance(value, Mapping):
        return {key: _plain(v) for key, v in value.items()}
    if isinstance(value, (list, tuple)):  # the schema's arrays hold objects or scalars, never both: a series of
        if value and isinstance(value[0], (Section, Mapping, list, tuple)):  # numbers is copied whole
            return [_plain(v) for v in value]
        return list(value)
    return value


def _resolve(node: dict) -> dict:
    """A schema node with its $ref followed and a oneOf of null and one other shape reduced to that shape."""
    if "$ref" in node:
        node = schema()["$defs"][node["$ref"].rsplit("/", 1)[1]]
    options = [option for option in node.get("oneOf", ()) if option.get("type") != "null"]
    return _resolve(options[0]) if len(options) == 1 else node


def _class_name(path: tuple[str, ...]) -> str:
    return "".join(part.title().replace("_", "") for part in path) or "Result"


@lru_cache(maxsize=None)
def _section_class(path: tuple[str, ...]) -> type:
    """The dataclass of the object at a path of property names ("[]" for an array's items)."""
    node = _node(path)
    fields = [(name, Any, dataclasses.field(default=None)) for name in node["properties"]]
    if node.get("additionalProperties") is not False:
        fields.append((EXTRA, Mapping[str, Any], dataclasses.field(default=MappingProxyType({}))))
    fields.append(("_present", frozenset, dataclasses.field(default=frozenset(), repr=False, compare=False)))
    return dataclasses.make_dataclass(_class_name(path), fields, bases=(Section,), frozen=True)


def _node(path: tuple[str, ...]) -> dict:
    node = schema()
    for part in path:
        node = _resolve(node["items"] if part == "[]" else node["properties"][part])
    return node


def _convert(value: Any, node: dict, path: tuple[str, ...]) -> Any:
    node = _resolve(node)
    if value is None:
        return None
    if isinstance(value, Mapping):
        if "properties" not in node:
            return MappingProxyType(dict(value))
        return _object(value, node, path)
    if isinstance(value, (list, tuple)):
        items = node.get("items")
        if isinstance(items, dict) and "properties" in _resolve(items):
            return tuple(_convert(item, items, (*path, "[]")) for item in value)
        return tuple(value)
    return value


def _object(value: Mapping, node: dict, path: tuple[str, ...]) -> Section:
    known = node["properties"]
    unknown = [key for key in value if key not in known]
    open_object = node.get("additionalProperties") is not False
    if unknown and not open_object:
        raise ResultError(f"{'/'.join(path) or '(top)'}: {', '.join(map(repr, unknown))} is no field of the "
                          "result schema (utils/spec/result.schema.json)")
    values = {key: _convert(value[key], known[key], (*path, key)) for key in value if key in known}
    if open_object:
        values[EXTRA] = MappingProxyType({key: value[key] for key in unknown})
    return _section_class(path)(**values, _present=frozenset(key for key in value if key in known))


def typed(result: Mapping | Section) -> Section:
    """The typed result of a result dict (checked against the schema already); a typed one is returned as it is."""
    if isinstance(result, Section):
        return result
    if not isinstance(result, Mapping):
        raise ResultError(f"a result is a JSON object, not {type(result).__name__}")
    return _object(result, schema(), ())


def load(path: str | os.PathLike) -> Section:
    """One result file, checked against the schema, typed; ResultError naming the file and its first problem."""
    try:
        data = load_result(path)
    except (OSError, ValueError) as err:
        raise ResultError(f"{path}: {err}") from None
    problems = schema_errors(data)
    if problems:
        raise ResultError(f"{path}: no result of utils/spec/result.schema.json ({problems[0]})")
    return typed(data)


def section_type(*path: str) -> type:
    """The dataclass of one section, e.g. section_type("performance") (type hints and tests)."""
    return _section_class(tuple(path))


Result = section_type()
