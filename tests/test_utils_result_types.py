"""The typed result (utils/spec/result_types.py): the schema's shape as frozen dataclasses, read by attribute."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from utils.spec.result import ResultError, schema
from utils.spec.result_types import Section, load, section_type, typed

FIXTURES = Path(__file__).parent / "fixtures" / "results"
PRIMUS_RESULT = FIXTURES / "amd" / "prim-llama-r1" / "result.json"


@pytest.fixture
def result() -> dict:
    return json.loads(PRIMUS_RESULT.read_text())


def test_sections_read_by_attribute_with_the_values_of_the_file(result):
    loaded = typed(result)
    assert loaded.run.status == result["run"]["status"]
    assert loaded.performance.mfu == result["performance"]["mfu"]
    assert loaded.performance.step_time_s.median == result["performance"]["step_time_s"]["median"]
    assert loaded.series.loss == tuple(result["series"]["loss"])


def test_every_object_the_schema_names_is_a_dataclass_with_its_properties():
    for name, node in schema()["properties"].items():
        if "properties" in node:
            fields = {item.name for item in dataclasses.fields(section_type(name))}
            assert set(node["properties"]) <= fields, name


def test_a_section_a_result_leaves_out_reads_as_none(result):
    result.pop("telemetry", None)
    assert typed(result).telemetry is None


def test_a_name_the_schema_does_not_have_is_an_error_not_a_none(result):
    with pytest.raises(AttributeError):
        typed(result).performance.tokens_per_second  # noqa: B018 - the typo a raw .get() would hide


def test_a_field_the_schema_does_not_allow_is_refused_with_its_path(result):
    result["performance"]["tokens_per_second"] = 1.0
    with pytest.raises(ResultError, match="performance: 'tokens_per_second' is no field"):
        typed(result)


def test_open_objects_keep_what_the_schema_does_not_name_in_extra(result):
    effective = typed(result).effective
    assert effective.extra["tp"] == result["effective"]["tp"]
    with pytest.raises(TypeError):
        effective.extra["tp"] = 4  # read-only: a reader cannot change what the next one reads


def test_sections_are_frozen(result):
    with pytest.raises(dataclasses.FrozenInstanceError):
        typed(result).run.status = "ok"


def test_round_trip_gives_the_same_json(result):
    assert typed(result).as_dict() == result
    nulls = copy.deepcopy(result)
    nulls["performance"]["mfu"] = None  # a null the file holds stays, an absent field stays absent
    assert typed(nulls).as_dict() == nulls


def test_typed_is_idempotent(result):
    once = typed(result)
    assert typed(once) is once and isinstance(once, Section)


def test_load_checks_the_file_against_the_schema(tmp_path, result):
    assert load(PRIMUS_RESULT).run.id == result["run"]["id"]
    result["run"]["status"] = "great"
    bad = tmp_path / "result.json"
    bad.write_text(json.dumps(result))
    with pytest.raises(ResultError, match="run/status"):
        load(bad)
    bad.write_text("{")
    with pytest.raises(ResultError, match=str(bad)):
        load(bad)


def test_a_field_held_as_null_is_told_from_one_left_out(result):
    result["performance"]["mfu"] = None
    result["performance"].pop("breakdown", None)
    performance = typed(result).performance
    assert performance.holds("mfu") and not performance.holds("breakdown")
    assert typed(result).effective.holds("tp")  # an open object's other keys count too
