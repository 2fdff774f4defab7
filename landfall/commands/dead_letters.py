"""`landfall dead-letters`: what sits on the dead-letter topic, where each message came from and why it failed.

Messages a function failed max_delivery_attempts times are forwarded to the dead-letter topic; its hold
subscription (`topics.dead_letter.subscription` in deploy/topology.toml) keeps them. The command pulls from that
subscription, holds what it pulled while it reads on, and then gives every message back at once (a nack: ack
deadline 0), so nothing is consumed: the messages stay for the next look, a replay or `gcloud pubsub subscriptions
pull --auto-ack` when they are dealt with (landfall/queries/dead_letters.py reads them). Reasons:
landfall/dead_letter_report.py.
"""

from __future__ import annotations

import argparse
import json
import sys

from landfall.commands.runs import positive
from landfall.dead_letter_report import DeadLetter
from landfall.queries.dead_letters import dead_letters


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


__all__ = ["cmd_dead_letters", "register"]
