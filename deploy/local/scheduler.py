"""The local stand-in for Cloud Scheduler: publishes one tick to each schedule's topic every `every_seconds`.

`python -m deploy.local.scheduler --project P [--every-seconds N]` reads [schedules.*] from
deploy/topology.toml, prints READY_LINE once its Pub/Sub client exists, and stops cleanly on SIGTERM or SIGINT.
The first tick of a schedule comes one period after the start, as a cron job's would. `landfall sweep` publishes
the same tick once, on demand (what `gcloud scheduler jobs run` does).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from deploy.topology import Schedule, TopologyError, load_topology

READY_LINE = "landfall scheduler ready"
"""Printed once the scheduler can publish; the local stack waits for it (processes.ServiceSpec.ready_log_line)."""
SCHEDULE_ATTRIBUTE = "schedule"
"""Message attribute naming the schedule that fired (Cloud Scheduler's Pub/Sub target sets it the same way)."""
PUBLISH_TIMEOUT_S = 30.0
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


@dataclass(frozen=True)
class Tick:
    """One Pub/Sub message from a schedule: JSON data and string attributes."""

    data: bytes
    attributes: dict[str, str]


def tick_for(schedule_name: str, now: datetime) -> Tick:
    """The message a schedule publishes: {"schedule": NAME, "tick_at": RFC 3339 UTC}, attribute schedule=NAME."""
    tick_at = now.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    data = json.dumps({"schedule": schedule_name, "tick_at": tick_at}, separators=(",", ":")).encode()
    return Tick(data=data, attributes={SCHEDULE_ATTRIBUTE: schedule_name})


def topic_path(project: str, topic: str) -> str:
    return f"projects/{project}/topics/{topic}"


def publish_tick(publisher: Any, project: str, schedule: Schedule, now: datetime) -> str:
    """Publish one tick of schedule and wait for Pub/Sub to accept it; returns the message id."""
    tick = tick_for(schedule.name, now)
    future = publisher.publish(topic_path(project, schedule.topic), tick.data, **tick.attributes)
    return str(future.result(timeout=PUBLISH_TIMEOUT_S))


def periods(schedules: Sequence[Schedule], every_seconds: int | None) -> dict[str, float]:
    """Seconds between ticks of each schedule: its topology value, or every_seconds for all when given."""
    return {s.name: float(every_seconds or s.every_seconds) for s in schedules}


def next_due(due: float, period: float, now: float) -> float:
    """The next tick time after one at `due`; ticks missed while publishing was slow are skipped, not bunched."""
    due += period
    while due <= now:
        due += period
    return due


def run(schedules: Sequence[Schedule], project: str, every_seconds: int | None) -> int:
    """Tick until SIGTERM or SIGINT. The signals are blocked and taken with sigtimedwait, so no wait sleeps through
    one and no handler runs in the middle of a publish."""
    from google.api_core.exceptions import GoogleAPIError
    from google.cloud import pubsub_v1

    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # before the client starts its threads: they inherit it
    publisher = pubsub_v1.PublisherClient()
    by_name = {s.name: s for s in schedules}
    period = periods(schedules, every_seconds)
    start = time.monotonic()
    due = {name: start + seconds for name, seconds in period.items()}
    described = ", ".join(f"{s.name} every {period[s.name]:g}s -> {topic_path(project, s.topic)}" for s in schedules)
    print(f"{READY_LINE}: {described}", flush=True)
    while True:
        name = min(due, key=due.__getitem__)
        stop = signal.sigtimedwait(STOP_SIGNALS, max(0.0, due[name] - time.monotonic()))
        if stop is not None:
            break
        try:
            message_id = publish_tick(publisher, project, by_name[name], datetime.now(UTC))
            print(f"tick {name}: message {message_id}", flush=True)
        except (GoogleAPIError, TimeoutError) as exc:
            # Cloud Scheduler logs a failed attempt and fires again at the next period; so does this.
            print(
                f"tick {name}: publish to {topic_path(project, by_name[name].topic)} failed, next one in "
                f"{period[name]:g}s: {exc!r}",
                flush=True,
            )
        due[name] = next_due(due[name], period[name], time.monotonic())
    publisher.stop()
    print(f"landfall scheduler stopped by {signal.Signals(stop.si_signo).name}", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.local.scheduler",
        description="Publish each topology schedule's tick to the Pub/Sub emulator.",
    )
    parser.add_argument(
        "--project",
        default=os.environ.get("GOOGLE_CLOUD_PROJECT") or load_topology().project_id,
        help="project of the topics (default: GOOGLE_CLOUD_PROJECT, else the topology's local id)",
    )
    parser.add_argument(
        "--every-seconds", type=int, metavar="N", help="tick every N seconds instead of each schedule's every_seconds"
    )
    parser.add_argument(
        "--schedule",
        action="append",
        metavar="NAME",
        help="run only this schedule (repeatable; default: every schedule in the topology)",
    )
    args = parser.parse_args(argv)
    if args.every_seconds is not None and args.every_seconds < 1:
        parser.error(f"--every-seconds must be >= 1, got {args.every_seconds}")
    if not os.environ.get("PUBSUB_EMULATOR_HOST"):
        parser.error(
            "PUBSUB_EMULATOR_HOST is not set: this scheduler stands in for Cloud Scheduler on the local "
            "stack only (`landfall up` starts it; `source .landfall/env` sets the variable)"
        )
    topology = load_topology()
    try:
        schedules = [topology.schedule(name) for name in args.schedule] if args.schedule else list(topology.schedules)
    except TopologyError as exc:
        parser.error(str(exc))
    if not schedules:
        parser.error("the topology has no [schedules.*]; nothing to tick")
    return run(schedules, args.project, args.every_seconds)


if __name__ == "__main__":
    sys.exit(main())
