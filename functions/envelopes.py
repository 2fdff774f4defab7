"""Decodes what arrives at a function: a Pub/Sub push (messagePublished CloudEvent) or a storage CloudEvent.

Every decoding failure is a PermanentError naming what was expected: redelivering the same bytes cannot help.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from functions.errors import PermanentError

PUBSUB_PUBLISHED = "google.cloud.pubsub.topic.v1.messagePublished"
STORAGE_FINALIZED = "google.cloud.storage.object.v1.finalized"
STORAGE_EVENT_PREFIX = "google.cloud.storage.object.v1."
MAX_MESSAGE_FIELD = 128
"""Longest messageId or publishTime taken: Pub/Sub sends ids of about 20 digits and 30-character times."""
MAX_BUCKET_NAME = 222
"""Cloud Storage's longest bucket name (dotted names); a longer one is not from Cloud Storage."""


@dataclass(frozen=True)
class PubSubMessage:
    data: bytes
    attributes: dict[str, str] = field(default_factory=dict)
    message_id: str = ""
    publish_time: str = ""
    subscription: str = ""
    """The subscription that delivered it (projects/P/subscriptions/S, in an Eventarc event's data); "" if not said."""
    topic: str = ""
    """The topic it was published on (projects/P/topics/T), "" when not said: a push whose endpoint path names the
    topic gets it as the CloudEvent's source (functions-framework). The dispatcher knows a team's own requests topic
    by it (docs/teams.md)."""


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


_NOTIFICATION_KINDS = {
    "OBJECT_FINALIZE": "finalize",
    "OBJECT_DELETE": "delete",
    "OBJECT_METADATA_UPDATE": "metadata",
    "OBJECT_ARCHIVE": "archive",
}
_CLOUDEVENT_KINDS = {"finalized": "finalize", "deleted": "delete", "metadataUpdated": "metadata", "archived": "archive"}


BODY_DIGEST_LABEL = "body sha256:"
"""How a function's log line names a message's body (functions/main.py), so a dead letter's lines can be found."""


def body_digest(data: bytes) -> str:
    """A short digest of a message body: the same for the message and for its dead letter (which has a new id)."""
    import hashlib

    return hashlib.sha256(data).hexdigest()[:16]


def event_type(cloud_event: Any) -> str:
    return str(cloud_event["type"])


def shown(value: Any, limit: int = 80) -> str:
    """A value from an event as a reason may quote it: repr, cut to `limit` characters (hostile input can be huge)."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**40 else "a very long integer"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _text_field(message: Mapping[str, Any], *names: str) -> str:
    """A string field of the Pub/Sub message under either spelling; "" when absent."""
    value = next((message[n] for n in names if message.get(n) not in (None, "")), "")
    if not isinstance(value, str) or len(value) > MAX_MESSAGE_FIELD:
        raise PermanentError(
            f"Pub/Sub message field {names[0]} is {shown(value)}; expected a string of at most "
            f"{MAX_MESSAGE_FIELD} characters as Pub/Sub sends it (an id or an RFC 3339 time)"
        )
    return value


def pubsub_message(cloud_event: Any) -> PubSubMessage:
    """The Pub/Sub message inside a messagePublished CloudEvent (functions-framework converts raw pushes)."""
    kind = event_type(cloud_event)
    if kind != PUBSUB_PUBLISHED:
        raise PermanentError(
            f"unexpected event type {shown(kind)}; this function is fed by a Pub/Sub subscription "
            f"and expects {PUBSUB_PUBLISHED!r}"
        )
    data = cloud_event.data
    if not isinstance(data, Mapping) or not isinstance(data.get("message"), Mapping):
        raise PermanentError('Pub/Sub event has no `message` object; expected {"message": {"data": ...}}')
    message = data["message"]
    try:
        payload = base64.b64decode(message.get("data") or b"", validate=True)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise PermanentError(f"Pub/Sub message data is not base64 ({exc})") from exc
    attributes = message.get("attributes") or {}
    if not isinstance(attributes, Mapping) or not all(isinstance(v, str) for v in attributes.values()):
        raise PermanentError(f"Pub/Sub message attributes are {shown(attributes)}; expected an object of string values")
    return PubSubMessage(
        data=payload,
        attributes=dict(attributes),
        message_id=_text_field(message, "messageId", "message_id"),
        publish_time=_text_field(message, "publishTime", "publish_time"),
        subscription=_text_field(data, "subscription"),
        topic=_topic_of(cloud_event),
    )


_TOPIC = re.compile(r"projects/[^/?]+/topics/[^/?]+")


def _topic_of(cloud_event: Any) -> str:
    """The topic a messagePublished event names in its source (//pubsub.googleapis.com/projects/P/topics/T)."""
    try:
        source = cloud_event["source"]
    except (KeyError, TypeError):
        return ""
    found = _TOPIC.search(source) if isinstance(source, str) and len(source) <= MAX_MESSAGE_FIELD else None
    return found.group(0) if found else ""


def object_event(cloud_event: Any) -> ObjectEvent:
    """An ObjectEvent from either a GCS Pub/Sub notification (JSON_API_V1) or a storage CloudEvent."""
    kind = event_type(cloud_event)
    if kind.startswith(STORAGE_EVENT_PREFIX):
        payload = cloud_event.data if isinstance(cloud_event.data, Mapping) else {}
        return _from_resource(
            _CLOUDEVENT_KINDS.get(kind.removeprefix(STORAGE_EVENT_PREFIX), "unknown"),
            payload,
            str(cloud_event["id"]),
            source=kind[:100],
        )
    message = pubsub_message(cloud_event)
    attrs = message.attributes
    notification = attrs.get("eventType", "")
    if not notification:
        raise PermanentError(
            "Pub/Sub message has no eventType attribute; expected a Cloud Storage notification "
            "(payload format JSON_API_V1) with attributes eventType, bucketId, objectId"
        )
    resource: Mapping[str, Any] = {}
    if message.data:
        from schemas import json_text

        try:
            parsed = json_text.loads(message.data)
        except json_text.JsonTextError as exc:
            raise PermanentError(
                f"notification payload is not JSON ({exc}); expected the object resource (payload format JSON_API_V1)"
            ) from exc
        resource = parsed if isinstance(parsed, Mapping) else {}
    merged = {
        **resource,
        "bucket": attrs.get("bucketId") or resource.get("bucket"),
        "name": attrs.get("objectId") or resource.get("name"),
        "generation": attrs.get("objectGeneration") or resource.get("generation"),
    }
    return _from_resource(
        _NOTIFICATION_KINDS.get(notification, "unknown"),
        merged,
        message.message_id,
        source=f"notification {notification[:60]}",
    )


def _decimal(value: Any, what: str, source: str) -> str:
    """A GCS int64 field (generation, size) as its decimal string: JSON_API_V1 sends them as ASCII digits."""
    small = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**20
    text = str(value) if small else value
    if not isinstance(text, str) or not (text.isascii() and text.isdigit()) or len(text) > 20:
        raise PermanentError(
            f"{source}: object {what} {shown(value, 40)} is not a decimal integer; expected digits as "
            "Cloud Storage sends them (JSON_API_V1). The event is acknowledged without a request."
        )
    return text


def _from_resource(kind: str, resource: Mapping[str, Any], event_id: str, *, source: str) -> ObjectEvent:
    """Every field is checked here, so a malformed event is refused once instead of failing (and retrying) later."""
    bucket, name, generation = resource.get("bucket"), resource.get("name"), resource.get("generation")
    if not bucket or not name:
        raise PermanentError(f"{source}: object event lacks bucket or object name; expected both")
    if not isinstance(bucket, str) or not isinstance(name, str):
        raise PermanentError(
            f"{source}: object bucket and name must be strings, got {type(bucket).__name__} and {type(name).__name__}"
        )
    if len(bucket) > MAX_BUCKET_NAME:
        raise PermanentError(
            f"{source}: bucket name {shown(bucket)} is {len(bucket)} characters; Cloud Storage "
            f"bucket names have at most {MAX_BUCKET_NAME}"
        )
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
