"""Malformed notification fields are refused at the envelope (acknowledged with a reason),
never a ValueError deep in ingest that is retried for half an hour."""

from __future__ import annotations

import json

import pytest
from cloudevents.http import CloudEvent

from functions import envelopes
from functions.errors import PermanentError

NOTIFICATION = {
    "eventType": "OBJECT_FINALIZE",
    "bucketId": "landfall-landing",
    "objectId": "datasets/d/_SUCCESS",
    "payloadFormat": "JSON_API_V1",
}


def _notification(resource: dict[str, object], **attributes: str) -> CloudEvent:
    import base64

    message = {
        "data": base64.b64encode(json.dumps(resource).encode()).decode(),
        "messageId": "9",
        "attributes": {**NOTIFICATION, **attributes},
    }
    return CloudEvent({"type": envelopes.PUBSUB_PUBLISHED, "source": "//pubsub", "id": "9"}, {"message": message})


def _storage_event(resource: dict[str, object]) -> CloudEvent:
    return CloudEvent({"type": envelopes.STORAGE_FINALIZED, "source": "//storage", "id": "c1"}, resource)


@pytest.mark.parametrize("bad", ["abc", "²", "-1", "1.5", " 12", "1" * 21, True])
@pytest.mark.parametrize("field", ["generation", "size"])
def test_a_non_decimal_generation_or_size_is_refused_by_name(field: str, bad: object) -> None:
    resource = {
        "bucket": "landfall-landing",
        "name": "datasets/d/part-0.csv",
        "generation": "17",
        "size": "3",
        field: bad,
    }
    for event in (_storage_event(resource), _notification(resource)):
        if field == "generation" and event["type"] == envelopes.PUBSUB_PUBLISHED:
            event = _notification(resource, objectGeneration=str(bad))
        with pytest.raises(PermanentError, match=rf"object {field} .* is not a decimal integer"):
            envelopes.object_event(event)


def test_well_formed_fields_pass_through() -> None:
    event = envelopes.object_event(
        _storage_event({"bucket": "b", "name": "n", "generation": "1700000000000001", "size": "42"})
    )
    assert (event.generation, event.size) == ("1700000000000001", 42)
    assert envelopes.object_event(_storage_event({"bucket": "b", "name": "n"})).size is None


def test_a_bucket_or_name_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(PermanentError, match="must be strings"):
        envelopes.object_event(_storage_event({"bucket": "b", "name": ["x"], "generation": "1"}))


def test_the_entry_point_acknowledges_a_malformed_storage_event(monkeypatch: pytest.MonkeyPatch) -> None:
    """Returning (HTTP 2xx) is the acknowledgement; before the fix ingest raised ValueError (HTTP 500, retried)."""
    from functions import main

    logged: list[str] = []
    monkeypatch.setattr(main.log, "error", lambda fmt, *args: logged.append(fmt % args))
    main.on_object_finalized(_storage_event({"bucket": "b", "name": "datasets/d/_SUCCESS", "generation": "abc"}))
    assert len(logged) == 1 and "acknowledged without retry" in logged[0] and "not a decimal integer" in logged[0]
