"""What the fuzzing (tests/unit/fuzz/) found, each pinned by a plain example: before the fix every one of these raised
an unexpected exception (retried for half an hour), or acknowledged with a reason too long to read, or stored a
record Firestore refuses."""

from __future__ import annotations

import base64
import json

import pytest
from cloudevents.http import CloudEvent

from functions import envelopes
from functions.errors import PermanentError
from functions.ingest.dataset_names import name_problem
from functions.ingest.manifest import ManifestError, parse_manifest
from functions.ingest.routes import ROUTES_FILE, load_routes
from schemas import json_text
from schemas.dataset_layout import MARKER, OVERRIDES
from schemas.errors import SchemaError
from schemas.job_event import parse_job_event
from schemas.run_record import RunState
from schemas.training_request import parse_training_request, run_id_for
from tests.fakes import ingest
from tests.fakes.world import REQUEST, World

DEEP = b"[" * 100_000
LONG_INTEGER = b"9" * 5_000
LONE_SURROGATE = b'{"task": "\\ud800"}'


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (DEEP, "nested too deeply"),
        (LONG_INTEGER, "4300 digits"),
        (LONE_SURROGATE, "lone surrogate"),
        (b"\xff", "utf-8"),
    ],
)
def test_json_text_refuses_what_json_loads_crashes_on_or_lets_through(raw: bytes, says: str) -> None:
    with pytest.raises(json_text.JsonTextError, match=says):
        json_text.loads(raw)


@pytest.mark.parametrize("raw", [DEEP, LONG_INTEGER, LONE_SURROGATE])
def test_every_parser_of_outside_json_refuses_it_with_its_own_error(raw: bytes) -> None:
    with pytest.raises(SchemaError, match="not JSON"):
        parse_training_request(raw)
    with pytest.raises(SchemaError, match="not JSON"):
        parse_job_event(raw)
    with pytest.raises(ManifestError, match="not JSON"):
        parse_manifest(raw)


@pytest.mark.parametrize("raw", [DEEP, LONG_INTEGER, LONE_SURROGATE])
def test_the_dispatcher_drops_unreadable_json_instead_of_crashing(raw: bytes) -> None:
    w = World()
    assert w.deliver(raw) == "dropped:unreadable"
    assert w.runs.docs == {}


def test_a_rejected_run_keeps_values_firestore_cannot_hold_as_their_json_text() -> None:
    raw = {
        "idempotency_key": "k-big",
        "dataset": 2**63,
        "task": "tabular-classification",
        "model": {"a": [[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]},
    }
    w = World()
    assert w.deliver(json.dumps(raw).encode()) == "rejected:invalid-request"
    run = w.run(run_id_for("k-big"))
    assert run.state == RunState.REJECTED and run.error is not None and "dataset" in run.error.message
    assert run.request["dataset"] == "9223372036854775808"
    assert run.request["model"] == json.dumps(raw["model"])
    assert run.request["task"] == "tabular-classification"


def _pubsub(message: dict[str, object], kind: str = envelopes.PUBSUB_PUBLISHED) -> CloudEvent:
    return CloudEvent({"type": kind, "source": "//fuzz", "id": "1"}, {"message": message})


@pytest.mark.parametrize(
    ("message", "says"),
    [
        ({"data": "", "attributes": True}, "attributes are True"),
        ({"data": "", "attributes": {"eventType": 5}}, "expected an object of string values"),
        ({"data": "", "messageId": {}}, "field messageId is {}"),
        ({"data": "", "publishTime": 1.5}, "field publishTime is 1.5"),
        (
            {"data": "", "messageId": "x" * 3873},
            r"field messageId is 'xxx.*\.\.\. \(3875 characters\); expected a string of at most 128",
        ),
    ],
)
def test_a_malformed_pubsub_message_is_refused_by_field(message: dict[str, object], says: str) -> None:
    with pytest.raises(PermanentError, match=says):
        envelopes.pubsub_message(_pubsub(message))


def test_a_huge_event_type_or_generation_is_cut_in_the_reason() -> None:
    with pytest.raises(PermanentError) as caught:
        envelopes.pubsub_message(_pubsub({"data": ""}, kind="x" * 70_000))
    assert len(str(caught.value)) < 300 and "70002 characters" in str(caught.value)
    storage = CloudEvent(
        {"type": envelopes.STORAGE_FINALIZED, "source": "//fuzz", "id": "1"},
        {"bucket": "b", "name": "datasets/d/x.csv", "generation": 10**4000},
    )
    with pytest.raises(PermanentError, match="generation a very long integer is not a decimal integer"):
        envelopes.object_event(storage)


def test_an_object_name_with_a_lone_surrogate_is_ignored_with_a_reason() -> None:
    name = f"datasets/a\ud800/{MARKER}"
    assert "lone surrogate" in (name_problem(name) or "")
    w = ingest.World(load_routes(ROUTES_FILE))
    assert w.deliver(name, "7") == "ignored:bad-name"


def _refusal(overrides: bytes) -> str:
    w = ingest.World(load_routes(ROUTES_FILE))
    w.objects.put("datasets/d/part-0.csv", b"a,b\n1,2\n")
    w.objects.put(f"datasets/d/{OVERRIDES}", overrides)
    assert w.upload(f"datasets/d/{MARKER}", b"").startswith("refused:")
    return str(w.dataset("datasets/d/")["reason"])


def test_landfall_json_labels_that_are_not_an_object_are_refused_naming_labels() -> None:
    assert "labels: expected an object of string values" in _refusal(b'{"labels": 5}')


def test_landfall_json_refusals_cut_hostile_keys_and_name_the_settable_fields_once() -> None:
    reason = _refusal(json.dumps({"x" * 1000: {"epochs": 1}, **{f"k{i}": 1 for i in range(9)}}).encode())
    assert len(reason) < 1350 and reason.count("Settable fields:") == 1 and "and 5 more" in reason


def test_a_deadline_past_year_9999_in_utc_is_refused_naming_the_field() -> None:
    raw = {**REQUEST.to_dict(), "constraints": {"deadline": "9999-12-31T23:59:59-23:59"}}
    with pytest.raises(SchemaError, match=r"constraints\.deadline: .* outside the years 1 to 9999"):
        parse_training_request(raw)


def test_a_pinned_shape_with_no_preset_is_rejected_not_crashed() -> None:
    raw = {**REQUEST.to_dict(), "model": {"preset": ""}, "constraints": {"machine_type": "a3-highgpu-8g"}}
    w = World()
    assert w.deliver(json.dumps(raw).encode()) == "rejected:invalid-request"
    (doc,) = w.runs.docs.values()
    assert "model.preset" in doc["error"]["message"] and "constraints.machine_type" in doc["error"]["message"]


def test_a_job_id_of_non_ascii_digits_is_not_a_job_event() -> None:
    entry = {"resource": {"type": "ml_job", "labels": {"job_id": "١٢٣"}}}
    with pytest.raises(SchemaError, match="not a numeric CustomJob id"):
        parse_job_event(json.dumps(entry))


def test_a_notification_payload_nested_too_deeply_is_refused() -> None:
    message: dict[str, object] = {
        "data": base64.b64encode(DEEP).decode(),
        "attributes": {"eventType": "OBJECT_FINALIZE"},
    }
    with pytest.raises(PermanentError, match="nested too deeply"):
        envelopes.object_event(_pubsub(message))


def test_a_manifest_size_past_int64_is_refused_and_not_echoed_whole() -> None:
    """Found by `make fuzz` (1,000 examples): a 4,000-digit size was taken, and echoed whole in the WAITING reason."""
    entry = json.dumps({"objects": [{"name": "part-0.csv", "size": 10**4000}]}).encode()
    with pytest.raises(ManifestError, match=r"at most 9223372036854775807.*, got 1000000000.*\.\.\.$") as caught:
        parse_manifest(entry)
    assert len(str(caught.value)) < 300


def test_a_waiting_manifest_names_long_missing_objects_cut() -> None:
    """The reason names at most five missing objects, each cut to 100 characters (names may be 1,024 bytes)."""
    from functions.ingest.manifest import manifest_problems

    entries = parse_manifest(
        json.dumps({"objects": [{"name": f"{i}{'x' * 1000}.csv", "size": 1} for i in range(9)]}).encode()
    )
    (problem,) = manifest_problems(entries, {})
    assert len(problem) < 700 and "and 4 more" in problem


def test_a_bucket_name_longer_than_cloud_storage_allows_is_refused_not_logged_whole() -> None:
    """Found by `make fuzz`: a 3,535-character bucketId was echoed whole in the 'not a landing bucket' log line."""
    message: dict[str, object] = {
        "data": "",
        "messageId": "1",
        "attributes": {"eventType": "OBJECT_FINALIZE", "bucketId": "x" * 3535, "objectId": "datasets/d/x.csv"},
    }
    with pytest.raises(PermanentError, match=r"bucket name .* is 3535 characters; .* at most 222") as caught:
        envelopes.object_event(_pubsub(message))
    assert len(str(caught.value)) < 300
