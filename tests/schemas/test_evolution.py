"""The schema-evolution gate: released versions are frozen, and every new version reads and
is read by all the older ones."""

import json
import shutil

import pytest

from strata.schemas import Catalog, default_catalog
from strata.schemas.catalog import AVSC_DIR
from strata.schemas.evolution import compatibility_problems, lock_entries, lock_problems, read_lock


def test_released_schemas_are_frozen_and_all_released():
    assert lock_problems(default_catalog(), read_lock()) == []


def test_every_current_version_is_fully_compatible_with_every_older_one():
    assert compatibility_problems(default_catalog()) == []


def _catalog_with(tmp_path, name: str, change) -> Catalog:
    for path in AVSC_DIR.glob("*.avsc"):
        shutil.copy(path, tmp_path / path.name)
    current = json.loads((AVSC_DIR / f"{name}.v1.avsc").read_text())
    change(current)
    (tmp_path / f"{name}.v2.avsc").write_text(json.dumps(current))
    return Catalog.load(tmp_path)


def _add_optional(schema):
    schema["fields"].append({"name": "zone", "type": ["null", "string"], "default": None})


def _add_required(schema):
    schema["fields"].append({"name": "zone", "type": "string"})


def _change_type(schema):
    schema["fields"][0]["type"] = "long"


def _drop_required(schema):
    schema["fields"] = [f for f in schema["fields"] if f["name"] != "node"]


def _drop_enum_symbol(schema):
    schema["fields"][0]["type"]["symbols"] = ["ADDED", "MODIFIED"]


def test_a_compatible_change_passes(tmp_path):
    assert compatibility_problems(_catalog_with(tmp_path, "Bind", _add_optional)) == []


@pytest.mark.parametrize(
    ("name", "change", "words"),
    [
        ("Bind", _add_required, "reader_field_missing_default_value"),
        ("Bind", _change_type, "type"),
        ("Bind", _drop_required, "node"),  # old readers need the field the new writer dropped
        ("WatchEvent", _drop_enum_symbol, "DELETED"),
    ],
    ids=["required-field-added", "type-changed", "required-field-dropped", "enum-symbol-dropped"],
)
def test_a_breaking_change_fails_the_gate(tmp_path, name, change, words):
    problems = compatibility_problems(_catalog_with(tmp_path, name, change))
    assert problems, "the gate let a breaking change through"
    assert any(words.lower() in p.lower() for p in problems), problems


def test_editing_a_released_version_fails_the_gate(tmp_path):
    for path in AVSC_DIR.glob("*.avsc"):
        shutil.copy(path, tmp_path / path.name)
    locked = lock_entries(Catalog.load(tmp_path))
    edited = json.loads((tmp_path / "Bind.v1.avsc").read_text())
    edited["fields"][2]["default"] = None
    edited["doc"] = "edited in place"
    (tmp_path / "Bind.v1.avsc").write_text(json.dumps(edited))
    assert lock_problems(Catalog.load(tmp_path), locked) == [
        "Bind.v1.avsc: released but changed; add a new version file instead"
    ]
