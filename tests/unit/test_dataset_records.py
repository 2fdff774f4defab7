"""The stored dataset records (schemas/dataset_record.py, dataset_version.py, content_record.py), table-driven: each
golden example parses and writes back unchanged, each field that does not fit fails naming that field, and a
document written before a field existed still parses, with the default the readers used to assume."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import pytest

from schemas.content_record import parse_content_record
from schemas.dataset_record import DATASET_FIELDS, DatasetStatus, VersionStatus, parse_dataset_record
from schemas.dataset_version import parse_dataset_version
from schemas.errors import SchemaError

EXAMPLES = Path(__file__).resolve().parents[2] / "schemas" / "examples"


class Record(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


PARSERS: dict[str, Callable[[Mapping[str, Any]], Record]] = {
    "dataset_record": parse_dataset_record,
    "dataset_version": parse_dataset_version,
    "content_record": parse_content_record,
}


def golden(name: str) -> dict[str, Any]:
    return dict(json.loads((EXAMPLES / f"{name}.json").read_text()))


def changed(doc: dict[str, Any], path: str, value: object) -> dict[str, Any]:
    """doc with the value at dotted `path` replaced (`...` deletes it)."""
    new = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node = new
    for key in parents:
        node = node[key]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return new


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_golden_example_round_trips(name: str) -> None:
    doc = golden(name)
    assert PARSERS[name](copy.deepcopy(doc)).to_dict() == doc


def test_the_dataset_fields_are_the_documents() -> None:
    assert tuple(golden("dataset_record")) == DATASET_FIELDS
    record = parse_dataset_record(golden("dataset_record"))
    assert record.status == DatasetStatus.REQUESTED and record.version is not None
    assert record.version.status == VersionStatus.PUBLISHED and record.generation == 1003


BAD: list[tuple[str, str, object, str]] = [
    # (example, dotted field, value (... = missing), expected error)
    ("dataset_record", "dataset_id", ..., "dataset.dataset_id: is required but missing"),
    ("dataset_record", "bucket", 7, "dataset.bucket: expected a string, got int"),
    ("dataset_record", "prefix", None, "dataset.prefix: expected a string, got null"),
    ("dataset_record", "uri", ..., "dataset.uri: is required but missing"),
    ("dataset_record", "route", ["r"], "dataset.route: expected a string, got list"),
    ("dataset_record", "status", "DONE", "dataset.status: 'DONE' is not one of"),
    ("dataset_record", "reason", 3, "dataset.reason: expected a string, got int"),
    ("dataset_record", "updated_at", "yesterday", "dataset.updated_at: 'yesterday' is not an RFC 3339 timestamp"),
    ("dataset_record", "version", "v1", "dataset.version: expected a JSON object, got str"),
    ("dataset_record", "schema_version", "1", "dataset.schema_version: expected an integer, got str"),
    ("dataset_record", "version.idempotency_key", ..., "dataset.version.idempotency_key: is required but missing"),
    ("dataset_record", "version.run_id", 5, "dataset.version.run_id: expected a string, got int"),
    ("dataset_record", "version.kind", "upload", "dataset.version.kind: 'upload' is not one of"),
    ("dataset_record", "version.generation", "17a", "dataset.version.generation: '17a' is not an object generation"),
    ("dataset_record", "version.completed_by", ..., "dataset.version.completed_by: is required but missing"),
    ("dataset_record", "version.status", "SENT", "dataset.version.status: 'SENT' is not one of"),
    ("dataset_record", "version.content_key", 1, "dataset.version.content_key: expected a string, got int"),
    ("dataset_record", "version.duplicate_of", 1, "dataset.version.duplicate_of: expected a string, got int"),
    ("dataset_version", "run_id", ..., "dataset_version.run_id: is required but missing"),
    ("dataset_version", "idempotency_key", None, "dataset_version.idempotency_key: expected a string, got null"),
    ("dataset_version", "dataset_id", 1, "dataset_version.dataset_id: expected a string, got int"),
    ("dataset_version", "uri", ..., "dataset_version.uri: is required but missing"),
    ("dataset_version", "route", ..., "dataset_version.route: is required but missing"),
    ("dataset_version", "kind", "push", "dataset_version.kind: 'push' is not one of"),
    ("dataset_version", "completed_by", 1, "dataset_version.completed_by: expected a string, got int"),
    ("dataset_version", "generation", ..., "dataset_version.generation: is required but missing"),
    ("dataset_version", "status", "DONE", "dataset_version.status: 'DONE' is not one of"),
    ("dataset_version", "owner", 1, "dataset_version.owner: expected a string, got int"),
    ("dataset_version", "claim_until", "soon", "dataset_version.claim_until: 'soon' is not an RFC 3339 timestamp"),
    ("dataset_version", "attempts", -1, "dataset_version.attempts: must be >= 0, got -1"),
    ("dataset_version", "created_at", 5, "dataset_version.created_at: expected a string, got int"),
    ("dataset_version", "updated_at", "noon", "dataset_version.updated_at: 'noon' is not an RFC 3339 timestamp"),
    ("dataset_version", "event_id", 1, "dataset_version.event_id: expected a string, got int"),
    ("dataset_version", "reason", [], "dataset_version.reason: expected a string, got list"),
    ("dataset_version", "message_id", 1, "dataset_version.message_id: expected a string, got int"),
    ("dataset_version", "request", "{}", "dataset_version.request: expected a JSON object, got str"),
    ("dataset_version", "content_key", 1, "dataset_version.content_key: expected a string, got int"),
    ("dataset_version", "duplicate_of", 1, "dataset_version.duplicate_of: expected a string, got int"),
    ("dataset_version", "answered", "yes", "dataset_version.answered: expected true or false, got str"),
    ("dataset_version", "answered_at", "x", "dataset_version.answered_at: 'x' is not an RFC 3339 timestamp"),
    ("dataset_version", "last_republished_at", "x", "dataset_version.last_republished_at: 'x' is not an RFC 3339"),
    ("dataset_version", "republished_count", 1.5, "dataset_version.republished_count: expected an integer, got float"),
    ("dataset_version", "last_republished_message_id", 1, "dataset_version.last_republished_message_id: expected a"),
    ("dataset_version", "schema_version", 0, "dataset_version.schema_version: must be >= 1, got 0"),
    ("content_record", "content_key", ..., "content.content_key: is required but missing"),
    ("content_record", "digest", "XYZ", "content.digest: 'XYZ' is not a lower-case hex digest"),
    ("content_record", "dataset_id", 1, "content.dataset_id: expected a string, got int"),
    ("content_record", "uri", ..., "content.uri: is required but missing"),
    ("content_record", "run_id", None, "content.run_id: expected a string, got null"),
    ("content_record", "idempotency_key", ..., "content.idempotency_key: is required but missing"),
    ("content_record", "generation", True, "content.generation: expected a string, got bool"),
    ("content_record", "object_count", -1, "content.object_count: must be >= 0, got -1"),
    ("content_record", "total_bytes", "32", "content.total_bytes: expected an integer, got str"),
    ("content_record", "retrains", -2, "content.retrains: must be >= 0, got -2"),
    ("content_record", "created_at", "then", "content.created_at: 'then' is not an RFC 3339 timestamp"),
    ("content_record", "updated_at", 0, "content.updated_at: expected a string, got int"),
    ("content_record", "schema_version", None, "content.schema_version: expected an integer, got null"),
]


@pytest.mark.parametrize(("name", "path", "value", "error"), BAD, ids=[f"{n}.{p}" for n, p, _, _ in BAD])
def test_each_field_that_does_not_fit_is_named(name: str, path: str, value: object, error: str) -> None:
    with pytest.raises(SchemaError, match="^" + re.escape(error)) as raised:
        PARSERS[name](changed(golden(name), path, value))
    assert raised.value.field == error.split(":")[0]


def test_every_field_of_each_example_has_an_error_case() -> None:
    """The table covers each field of each golden example (a new field needs its row)."""

    def paths(doc: Mapping[str, Any], prefix: str = "") -> set[str]:
        out = set()
        for key, value in doc.items():
            if isinstance(value, dict) and key != "request":
                out |= paths(value, f"{prefix}{key}.")
            else:
                out.add(prefix + key)
        return out

    for name in PARSERS:
        covered = {path for n, path, _, _ in BAD if n == name}
        assert paths(golden(name)) <= covered | {"version"}, name


OLDER: list[tuple[str, tuple[str, ...], dict[str, object]]] = [
    # (example, fields an older Landfall did not write, what the record reads for them)
    ("dataset_record", ("schema_version", "reason"), {"schema_version": 1, "reason": ""}),
    ("dataset_record", ("version.content_key",), {}),
    ("dataset_version", ("owner", "attempts", "event_id"), {"owner": "", "attempts": 0, "event_id": ""}),
    (
        "dataset_version",
        ("answered", "answered_at", "last_republished_at", "republished_count", "last_republished_message_id"),
        {"answered": None, "republished_count": None, "last_republished_at": None},
    ),
    ("dataset_version", ("content_key",), {"content_key": None}),
    ("content_record", ("retrains", "schema_version"), {"retrains": 0, "schema_version": 1}),
]


@pytest.mark.parametrize(("name", "missing", "expected"), OLDER)
def test_documents_without_later_fields_still_parse(
    name: str, missing: tuple[str, ...], expected: dict[str, object]
) -> None:
    doc = golden(name)
    for path in missing:
        doc = changed(doc, path, ...)
    record = PARSERS[name](doc)
    assert {k: getattr(record, k) for k in expected} == expected
    assert PARSERS[name](record.to_dict()) == record  # written back with the defaults, it reads the same


def test_a_generation_stored_as_a_number_reads_as_its_text() -> None:
    record = parse_dataset_record(changed(golden("dataset_record"), "version.generation", 1003))
    assert record.version is not None and record.version.generation == "1003"
