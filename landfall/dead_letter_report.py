"""What `landfall dead-letters` says of one dead-lettered message: where it came from, when, and why it failed.

Pure. Pub/Sub adds the CloudPubSubDeadLetterSource* attributes when it forwards a message to the dead-letter topic
(the subscription it failed on, how many deliveries failed, when it was first published). Why it failed is taken,
in order, from: the function's own parser (a body it cannot read: the same check and the same error the function
gives), the function's log line naming the message (functions/main.py logs every retried delivery with its message
id and its body's digest: a dead letter has a new id, so the digest finds it; on the local stack the log is
.landfall/logs/FUNCTION.log), else what dead-lettering itself says.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass

SOURCE_SUBSCRIPTION = "CloudPubSubDeadLetterSourceSubscription"
SOURCE_PROJECT = "CloudPubSubDeadLetterSourceSubscriptionProject"
DELIVERY_COUNT = "CloudPubSubDeadLetterSourceDeliveryCount"
SOURCE_PUBLISH_TIME = "CloudPubSubDeadLetterSourceTopicPublishTime"
PUBSUB_ATTRIBUTES = (SOURCE_SUBSCRIPTION, SOURCE_PROJECT, DELIVERY_COUNT, SOURCE_PUBLISH_TIME)
PREVIEW_CHARS = 80


@dataclass(frozen=True)
class DeadLetter:
    message_id: str
    """The dead-lettered message's id on the dead-letter topic."""
    subscription: str
    """The subscription it failed on (as Pub/Sub names it in CloudPubSubDeadLetterSourceSubscription)."""
    function: str | None
    """The topology function fed by that subscription, when it is one of Landfall's."""
    published_at: str
    """When it was first published (CloudPubSubDeadLetterSourceTopicPublishTime), else when it was dead-lettered."""
    delivery_attempts: int | None
    preview: str
    """The body's first PREVIEW_CHARS characters (UTF-8, whitespace collapsed), or its size when not text."""
    reason: str
    attributes: dict[str, str]
    """The message's own attributes (Pub/Sub's dead-letter attributes left out)."""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def preview(data: bytes, limit: int = PREVIEW_CHARS) -> str:
    try:
        text = " ".join(data.decode("utf-8").split())
    except UnicodeDecodeError:
        return f"<{len(data)} bytes, not UTF-8>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _training_request(data: bytes, attributes: Mapping[str, str]) -> str | None:
    from schemas.errors import SchemaError
    from schemas.training_request import parse_training_request

    try:
        request = parse_training_request(data)
    except SchemaError as exc:
        return f"not a TrainingRequest: {exc}"
    return f"reads as a TrainingRequest (run {request.run_id})"


def _job_event(data: bytes, attributes: Mapping[str, str]) -> str | None:
    from schemas.errors import SchemaError
    from schemas.job_event import parse_job_event

    try:
        event = parse_job_event(data)
    except SchemaError as exc:
        return f"not a job event: {exc}"
    return f"reads as a job event (job {event.job_id})"


def _object_notification(data: bytes, attributes: Mapping[str, str]) -> str | None:
    from cloudevents.http import CloudEvent

    from functions import envelopes
    from functions.errors import PermanentError

    event = CloudEvent(
        {"type": envelopes.PUBSUB_PUBLISHED, "source": "landfall-dead-letters"},
        {"message": {"data": base64.b64encode(data).decode("ascii"), "attributes": dict(attributes)}},
    )
    try:
        found = envelopes.object_event(event)
    except PermanentError as exc:
        return f"not a storage notification: {exc}"
    return f"reads as a notification for gs://{found.bucket}/{found.name}"


BodyCheck = Callable[[bytes, Mapping[str, str]], str | None]


def body_checks() -> dict[str, BodyCheck]:
    """Function -> the check its entry point makes of a message, by the topic that feeds it (deploy/topology.toml;
    the schedule ticks' bodies are not read)."""
    from deploy.topology import load_topology

    topology = load_topology()
    by_topic: dict[str, BodyCheck] = {
        topology.requests_topic: _training_request,
        topology.job_events_topic: _job_event,
        topology.object_events_topic: _object_notification,
    }
    return {route.name: by_topic[route.topic] for route in topology.functions if route.topic in by_topic}


def body_reason(function: str | None, data: bytes, attributes: Mapping[str, str]) -> tuple[bool, str]:
    """(the body is unreadable to the function, what its parser says); (False, "") when nothing checks it."""
    check = body_checks().get(function or "")
    if check is None:
        return False, ""
    said = check(data, attributes) or ""
    return said.startswith("not a "), said


def log_reason(lines: Iterable[str], data: bytes) -> str | None:
    """The last thing the function logged about a message with this body (its `_run` line, which names the body's
    digest, and an exception's last line)."""
    from functions.envelopes import BODY_DIGEST_LABEL, body_digest

    needle = f"{BODY_DIGEST_LABEL}{body_digest(data)})"
    found = None
    for line in lines:
        if needle not in line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            found = line.strip()
            continue
        if not isinstance(entry, dict):
            continue
        text = str(entry.get("message", ""))
        exception = str(entry.get("exception") or "").strip().splitlines()
        found = f"{text} ({exception[-1]})" if exception else text
    return found


def describe(
    message_id: str,
    data: bytes,
    attributes: Mapping[str, str],
    publish_time: str,
    functions_by_subscription: Mapping[str, str],
    log_lines: Callable[[str], Iterable[str]],
) -> DeadLetter:
    """The report of one dead letter. log_lines(function) yields that function's log lines (none when unknown)."""
    subscription = attributes.get(SOURCE_SUBSCRIPTION, "")
    function = functions_by_subscription.get(subscription.rsplit("/", 1)[-1])
    count = attributes.get(DELIVERY_COUNT, "")
    attempts = int(count) if count.isdigit() else None
    own = {k: v for k, v in attributes.items() if k not in PUBSUB_ATTRIBUTES}
    unreadable, said = body_reason(function, data, own)
    reason = said
    if not unreadable:
        logged = log_reason(log_lines(function), data) if function else None
        failed = f"{attempts} deliveries failed" if attempts else "its deliveries failed"
        if logged:
            reason = f"{logged}" + (f" [{said}]" if said else "")
        else:
            reason = (
                f"{failed} without an acknowledgement (a transient error, a crash, or no answer within the "
                f"ack deadline); {said + '; ' if said else ''}the {function or subscription or 'function'} "
                "log says which"
            )
    return DeadLetter(
        message_id=message_id,
        subscription=subscription,
        function=function,
        published_at=attributes.get(SOURCE_PUBLISH_TIME) or publish_time,
        delivery_attempts=attempts,
        preview=preview(data),
        reason=reason,
        attributes=own,
    )


__all__ = [
    "DELIVERY_COUNT",
    "SOURCE_PUBLISH_TIME",
    "SOURCE_SUBSCRIPTION",
    "DeadLetter",
    "body_checks",
    "body_reason",
    "describe",
    "log_reason",
    "preview",
]
