"""Decodes what arrives at a function: a Pub/Sub push (messagePublished CloudEvent) or a storage CloudEvent.

Every decoding failure is a PermanentError naming what was expected: redelivering the same bytes cannot help.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from functions.errors import PermanentError

PUBSUB_PUBLISHED = "google.cloud.pubsub.topic.v1.messagePublished"
STORAGE_FINALIZED = "google.cloud.storage.object.v1.finalized"
STORAGE_EVENT_PREFIX = "google.cloud.storage.object.v1."


@dataclass(frozen=True)
class PubSubMessage:
    data: bytes
    attributes: dict[str, str] = field(default_factory=dict)
    message_id: str = ""
    publish_time: str = ""


@dataclass(frozen=True)
class ObjectEvent:
    """A storage object change, whichever way it arrived."""

    kind: str
    """"finalize", "delete", "metadata" or "archive"."""
    bucket: str
    name: str
    generation: str
    event_id: str
    size: int | None = None
    resource: Mapping[str, Any] = field(default_factory=dict)


_NOTIFICATION_KINDS = {"OBJECT_FINALIZE": "finalize", "OBJECT_DELETE": "delete",
                       "OBJECT_METADATA_UPDATE": "metadata", "OBJECT_ARCHIVE": "archive"}
_CLOUDEVENT_KINDS = {"finalized": "finalize", "deleted": "delete", "metadataUpdated": "metadata",
                     "archived": "archive"}


BODY_DIGEST_LABEL = "body sha256:"
"""How a function's log line names a message's body (functions/main.py), so a dead letter's lines can be found."""


def body_digest(data: bytes) -> str:
    """A short digest of a message body: the same for the message and for its dead letter (which has a new id)."""
    import hashlib

    return hashlib.sha256(data).hexdigest()[:16]


def event_type(cloud_event: Any) -> str:
    return str(cloud_event["type"])


def pubsub_message(cloud_event: Any) -> PubSubMessage:
    """The Pub/Sub message inside a messagePublished CloudEvent (functions-framework converts raw pushes)."""
    kind = event_type(cloud_event)
    if kind != PUBSUB_PUBLISHED:
        raise PermanentError(f"unexpected event type {kind!r}; this function is fed by a Pub/Sub subscription "
                             f"and expects {PUBSUB_PUBLISHED!r}")
    data = cloud_event.data
    if not isinstance(data, Mapping) or not isinstance(data.get("message"), Mapping):
        raise PermanentError("Pub/Sub event has no `message` object; expected {\"message\": {\"data\": ...}}")
    message = data["message"]
    try:
        payload = base64.b64decode(message.get("data") or b"", validate=True)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise PermanentError(f"Pub/Sub message data is not base64 ({exc})") from exc
    attributes = message.get("attributes") or {}
    return PubSubMessage(
        data=payload,
        attributes={str(k): str(v) for k, v in attributes.items()},
        message_id=str(message.get("messageId") or message.get("message_id") or ""),
        publish_time=str(message.get("publishTime") or message.get("publish_time") or ""),
    )


def object_event(cloud_event: Any) -> ObjectEvent:
    """An ObjectEvent from either a GCS Pub/Sub notification (JSON_API_V1) or a storage CloudEvent."""
    kind = event_type(cloud_event)
    if kind.startswith(STORAGE_EVENT_PREFIX):
        resource = cloud_event.data if isinstance(cloud_event.data, Mapping) else {}
        return _from_resource(_CLOUDEVENT_KINDS.get(kind.removeprefix(STORAGE_EVENT_PREFIX), "unknown"),
                              resource, str(cloud_event["id"]), source=kind)
    message = pubsub_message(cloud_event)
    attrs = message.attributes
    notification = attrs.get("eventType", "")
    if not notification:
        raise PermanentError("Pub/Sub message has no eventType attribute; expected a Cloud Storage notification "
                             "(payload format JSON_API_V1) with attributes eventType, bucketId, objectId")
    resource: Mapping[str, Any] = {}
    if message.data:
        import json

        try:
            parsed = json.loads(message.data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise PermanentError(f"notification payload is not JSON ({exc}); expected the object resource "
                                 "(payload format JSON_API_V1)") from exc
        resource = parsed if isinstance(parsed, Mapping) else {}
    merged = {**resource, "bucket": attrs.get("bucketId") or resource.get("bucket"),
              "name": attrs.get("objectId") or resource.get("name"),
              "generation": attrs.get("objectGeneration") or resource.get("generation")}
    return _from_resource(_NOTIFICATION_KINDS.get(notification, "unknown"), merged, message.message_id,
                          source=f"notification {notification}")


def _decimal(value: Any, what: str, source: str) -> str:
    """A GCS int64 field (generation, size) as its decimal string: JSON_API_V1 sends them as ASCII digits."""
    text = str(value)
    if isinstance(value, bool) or not (text.isascii() and text.isdigit()) or len(text) > 20:
        raise PermanentError(f"{source}: object {what} {text[:40]!r} is not a decimal integer; expected digits as "
                             "Cloud Storage sends them (JSON_API_V1). The event is acknowledged without a request.")
    return text


def _from_resource(kind: str, resource: Mapping[str, Any], event_id: str, *, source: str) -> ObjectEvent:
    """Every field is checked here, so a malformed event is refused once instead of failing (and retrying) later."""
    bucket, name, generation = resource.get("bucket"), resource.get("name"), resource.get("generation")
    if not bucket or not name:
        raise PermanentError(f"{source}: object event lacks bucket or object name; expected both")
    if not isinstance(bucket, str) or not isinstance(name, str):
        raise PermanentError(f"{source}: object bucket and name must be strings, got {type(bucket).__name__} and "
                             f"{type(name).__name__}")
    size = resource.get("size")
    return ObjectEvent(
        kind=kind,
        bucket=bucket,
        name=name,
        generation="" if generation in (None, "") else _decimal(generation, "generation", source),
        event_id=event_id,
        size=None if size in (None, "") else int(_decimal(size, "size", source)),
        resource=resource,
    )
