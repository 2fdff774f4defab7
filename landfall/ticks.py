"""Publishing one tick of a topology schedule now, as Cloud Scheduler (or the local scheduler) would: what
`landfall sweep` and `landfall reconcile` do."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

POLL_S = 0.5


def fed_by_schedule(schedule_name: str) -> str:
    """The function the named schedule's ticks drive (deploy/topology.toml), for help texts."""
    from deploy.topology import load_topology

    topology = load_topology()
    return topology.fed_by(topology.schedule(schedule_name).topic).name


def publish_schedule_tick(schedule_name: str) -> tuple[str, str]:
    """Publish one tick of the named schedule to its topic; returns the line to print and the message id. Raises
    CommandError when the topic does not exist or Pub/Sub cannot be reached."""
    from google.api_core.exceptions import NotFound
    from google.cloud import pubsub_v1

    from deploy.local.scheduler import publish_tick, topic_path
    from deploy.topology import load_topology
    from functions.settings import get_settings
    from landfall.errors import CommandError, client_boundary

    schedule = load_topology().schedule(schedule_name)
    with client_boundary(f"publish to the {schedule.topic} topic"):
        project = get_settings().project
        topic = topic_path(project, schedule.topic)
        try:
            message_id = publish_tick(pubsub_v1.PublisherClient(), project, schedule, datetime.now(UTC))
        except NotFound as exc:
            raise CommandError(
                f"topic {topic} does not exist: `landfall up` creates it on the local stack, "
                "the deployer in Google Cloud"
            ) from exc
    return f"published one {schedule.name} tick to {topic}: message id {message_id}", str(message_id)


def pass_log(function: str) -> Path | None:
    """The local stack's log of the named function (<state dir>/logs/), or None when the CLI is not aimed at a
    local stack that runs it (in Google Cloud the function logs to Cloud Logging)."""
    from deploy.local import provision, record

    pubsub = os.environ.get("PUBSUB_EMULATOR_HOST")
    current = record.read(provision.default_state_dir()) if pubsub else None
    if current is None or current.env.get("PUBSUB_EMULATOR_HOST") != pubsub:
        return None  # not aimed at the stack recorded in the state folder (another stack, or Google Cloud)
    service = current.service(function)
    return None if service is None else service.log_path


RETRIED = "will be retried: "
"""How answer_in labels a delivery that failed and will be delivered again (not the pass's last word)."""


def answer_in(lines: list[str], function: str, message_id: str) -> str | None:
    """The function's answer to the message in its log lines (functions/main.py): the outcome it logged for it,
    `failed: REASON` when it acknowledged it without retry, else `will be retried: REASON` when a delivery failed
    and another will come; None when there is none."""
    done_suffix = f" (message {message_id})"
    retried = None
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        text = record.get("message") if isinstance(record, dict) else None
        if not isinstance(text, str) or not text.startswith(f"{function}: "):
            continue
        body = text.removeprefix(f"{function}: ")
        if body.endswith(done_suffix):
            return body.removesuffix(done_suffix)
        if not body.startswith(f"message {message_id} "):
            continue
        if "acknowledged without retry: " in body:
            return "failed: " + body.split("acknowledged without retry: ", 1)[1]
        if "will be retried: " in body:
            retried = RETRIED + body.split("will be retried: ", 1)[1]
    return retried


def tick_outcome(
    log: Path,
    function: str,
    message_id: str,
    timeout_s: float,
    *,
    start: int = 0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> str | None:
    """Wait for the function's last word on the tick (answer_in) in its log file, read from byte `start` on: its
    outcome, or its refusal; a failed delivery is waited past (the bridge delivers it again) and returned only when
    timeout_s passed first. None when there is no answer at all within timeout_s."""
    deadline = clock() + timeout_s
    while True:
        lines = []
        if log.exists():
            with log.open("rb") as fh:
                fh.seek(start)
                lines = fh.read().decode("utf-8", errors="replace").splitlines()
        outcome = answer_in(lines, function, message_id)
        if (outcome is not None and not outcome.startswith(RETRIED)) or clock() >= deadline:
            return outcome
        sleep(POLL_S)
