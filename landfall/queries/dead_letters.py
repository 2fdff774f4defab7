"""What the stack could not deliver: the dead-letter topic's messages, each with where it came from and why it failed,
and the orphans (Vertex jobs no run owns) the reconciler recorded.

Messages a function failed max_delivery_attempts times are forwarded to the dead-letter topic; its hold
subscription (`topics.dead_letter.subscription` in deploy/topology.toml) keeps them. They are pulled from that
subscription, held while the rest is read, and then every one is given back at once (a nack: ack deadline 0), so
nothing is consumed: the messages stay for the next look, a replay or `gcloud pubsub subscriptions pull --auto-ack`
when they are dealt with. Reasons: landfall/dead_letter_report.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from landfall.dead_letter_report import DeadLetter, describe
from landfall.errors import CommandError, client_boundary
from landfall.queries.runs import Unreadable
from schemas.errors import SchemaError

if TYPE_CHECKING:
    from schemas.orphan_record import OrphanRecord

PULL_WAIT_S = 3.0
"""How long one pull waits for messages; the last, empty pull ends the reading."""
HOLD_SECONDS = 60
"""Ack deadline of what was pulled while the rest is read, so that it is not handed out again meanwhile."""
PULL_BATCH = 100


def pull_and_return(subscriber: Any, subscription: str, limit: int) -> list[Any]:
    """Up to `limit` messages of the subscription (ReceivedMessage), every one given back (nacked) before returning."""
    from google.api_core import exceptions as gexc

    pulled: list[Any] = []
    try:
        while len(pulled) < limit:
            try:
                response = subscriber.pull(
                    request={"subscription": subscription, "max_messages": min(PULL_BATCH, limit - len(pulled))},
                    timeout=PULL_WAIT_S,
                    retry=None,
                )
            except gexc.DeadlineExceeded:
                break
            batch = list(response.received_messages)
            if not batch:
                break
            subscriber.modify_ack_deadline(
                request={
                    "subscription": subscription,
                    "ack_ids": [m.ack_id for m in batch],
                    "ack_deadline_seconds": HOLD_SECONDS,
                }
            )
            pulled += batch
    finally:
        if pulled:
            subscriber.modify_ack_deadline(
                request={"subscription": subscription, "ack_ids": [m.ack_id for m in pulled], "ack_deadline_seconds": 0}
            )
    return pulled


def local_log_lines(function: str) -> Iterable[str]:
    """The function's log on the local stack (.landfall/logs/FUNCTION.log); nothing elsewhere."""
    from deploy.local import provision

    path: Path = provision.default_state_dir() / "logs" / f"{function}.log"
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError:
        return ()


def dead_letters(limit: int) -> tuple[str, list[DeadLetter]]:
    """(the hold subscription's path, its messages as reports, oldest first)."""
    from google.api_core.exceptions import NotFound
    from google.cloud import pubsub_v1

    from deploy.local.bridge import rfc3339
    from deploy.topology import load_topology
    from functions.settings import get_settings

    topology = load_topology()
    with client_boundary("read the dead-letter subscription"):
        project = get_settings().project
        subscription = f"projects/{project}/subscriptions/{topology.dead_letter_subscription}"
        subscriber = pubsub_v1.SubscriberClient()
        try:
            received = pull_and_return(subscriber, subscription, limit)
        except NotFound as exc:
            raise CommandError(
                f"subscription {subscription} does not exist: `landfall up` creates it on the local "
                "stack, `landfall deploy` in Google Cloud"
            ) from exc
        finally:
            subscriber.close()
    by_subscription = {f.subscription: f.name for f in topology.functions}
    reports = [
        describe(
            m.message.message_id,
            bytes(m.message.data),
            dict(m.message.attributes),
            rfc3339(m.message.publish_time),
            by_subscription,
            local_log_lines,
        )
        for m in received
    ]
    return subscription, sorted({r.message_id: r for r in reports}.values(), key=lambda r: r.published_at)


ORPHANS_TIMEOUT_S = 20.0
"""Deadline of the orphans query."""


def orphans(limit: int) -> list[dict[str, Any]]:
    """The newest `limit` orphan documents as stored (the reconciler's orphans collection), newest first."""
    from google.cloud import firestore

    from functions.operations import firestore_client
    from functions.settings import get_settings

    with client_boundary("read the orphans from Firestore"):
        collection = firestore_client().collection(get_settings().orphans_collection)
        query = collection.order_by("found_at", direction=firestore.Query.DESCENDING).limit(limit)
        return [doc for d in query.stream(timeout=ORPHANS_TIMEOUT_S) if (doc := d.to_dict()) is not None]


@dataclass(frozen=True)
class ReadOrphans:
    """Orphan documents read through schemas/orphan_record.py: those that fit, and those that do not."""

    orphans: tuple[OrphanRecord, ...]
    unreadable: tuple[Unreadable, ...]


def parse_orphans(docs: Iterable[dict[str, Any]]) -> ReadOrphans:
    from schemas.orphan_record import parse_orphan_record

    read: list[OrphanRecord] = []
    unreadable: list[Unreadable] = []
    for doc in docs:
        try:
            read.append(parse_orphan_record(doc))
        except SchemaError as exc:
            unreadable.append(Unreadable(doc.get("job_id", "?"), exc))
    return ReadOrphans(tuple(read), tuple(unreadable))
