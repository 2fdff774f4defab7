"""`landfall dead-letters`: what sits on the dead-letter topic, where each message came from and why it failed.

Messages a function failed max_delivery_attempts times are forwarded to the dead-letter topic; its hold
subscription (`topics.dead_letter.subscription` in deploy/topology.toml) keeps them. The command pulls from that
subscription, holds what it pulled while it reads on, and then gives every message back at once (a nack: ack
deadline 0), so nothing is consumed: the messages stay for the next look, a replay or `gcloud pubsub subscriptions
pull --auto-ack` when they are dealt with. Reasons: landfall/dead_letter_report.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from landfall.commands.runs import positive
from landfall.dead_letter_report import DeadLetter, describe
from landfall.errors import CommandError, client_boundary

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


def render(subscription: str, reports: list[DeadLetter]) -> str:
    if not reports:
        return f"no dead letters on {subscription}"
    lines = [
        f"{len(reports)} dead letter(s) on {subscription}, oldest first (left there: this command consumes nothing)"
    ]
    for r in reports:
        source = f"{r.function} ({r.subscription})" if r.function else (r.subscription or "an unknown subscription")
        attempts = f", {r.delivery_attempts} deliveries" if r.delivery_attempts else ""
        lines += [
            "",
            f"message {r.message_id}  from {source}{attempts}, published {r.published_at}",
            f"  body    {r.preview}",
            f"  reason  {r.reason}",
        ]
        if r.attributes:
            lines.append("  attrs   " + ", ".join(f"{k}={v}" for k, v in sorted(r.attributes.items())))
    return "\n".join(lines)


def cmd_dead_letters(args: argparse.Namespace) -> int:
    subscription, reports = dead_letters(args.limit)
    if args.json:
        print(json.dumps([r.to_dict() for r in reports], indent=2))
    else:
        print(render(subscription, reports))
    if len(reports) >= args.limit:
        print(f"landfall dead-letters: showing the first {args.limit}; --limit N shows more", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "dead-letters",
        help="list the messages on the dead-letter topic and why each one failed",
        description="Reads the dead-letter topic's hold subscription: for each message the "
        "subscription (function) it failed on, its delivery attempts, when it was "
        "published, the start of its body and why it failed (the function's parser, "
        "else its log line naming the message). The messages are pulled and then "
        "given back (nacked, ack deadline 0): nothing is consumed.",
    )
    p.add_argument("--limit", type=positive, default=50, metavar="N", help="read at most N messages (default 50)")
    p.add_argument("--json", action="store_true", help="print the reports as JSON")
    p.set_defaults(func=cmd_dead_letters)


__all__ = ["cmd_dead_letters", "dead_letters", "pull_and_return", "register"]
