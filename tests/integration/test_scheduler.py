"""The local Cloud Scheduler stand-in against the real Pub/Sub emulator: its ticks reach a pull subscription on the
sweep topic, and SIGTERM stops it cleanly."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from deploy.local import processes, provision, services
from deploy.local.scheduler import READY_LINE, SCHEDULE_ATTRIBUTE
from deploy.topology import load_topology
from tests.conftest import PROJECT, Emulator


def _pull_subscription(topic: str) -> tuple[Any, str]:
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    path = subscriber.subscription_path(PROJECT, f"test-sweep-ticks-{uuid.uuid4().hex[:8]}")
    subscriber.create_subscription(
        request={"name": path, "topic": f"projects/{PROJECT}/topics/{topic}", "ack_deadline_seconds": 10}
    )
    return subscriber, path


def _pull(subscriber: Any, path: str, want: int, timeout_s: float) -> list[Any]:
    received: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(received) < want and time.monotonic() < deadline:
        response = subscriber.pull(request={"subscription": path, "max_messages": 10}, timeout=5)
        if response.received_messages:
            received += [m.message for m in response.received_messages]
            subscriber.acknowledge(
                request={"subscription": path, "ack_ids": [m.ack_id for m in response.received_messages]}
            )
    return received


def test_scheduler_ticks_reach_the_sweep_topic_and_sigterm_stops_it(pubsub_emulator: Emulator, tmp_path: Path) -> None:
    topology = load_topology()
    schedule = topology.schedule("ingest_sweep")
    provision.create_topics(topology, PROJECT)
    subscriber, path = _pull_subscription(schedule.topic)
    spec = services.scheduler(
        project=PROJECT,
        every_seconds=1,
        schedules=(schedule.name,),
        env={"PUBSUB_EMULATOR_HOST": pubsub_emulator.host, "PYTHONUNBUFFERED": "1"},
    )
    started = datetime.now(UTC)
    service = processes.start(spec, tmp_path)
    try:
        assert service.port is None
        messages = _pull(subscriber, path, want=2, timeout_s=30)
    finally:
        processes.stop(service)
    subscriber.close()

    assert len(messages) >= 2, f"expected 2 ticks within 30s, got {len(messages)}; see {service.log_path}"
    for message in messages:
        body = json.loads(message.data)
        assert body["schedule"] == "ingest_sweep"
        assert dict(message.attributes) == {SCHEDULE_ATTRIBUTE: "ingest_sweep"}
        tick_at = datetime.fromisoformat(body["tick_at"].replace("Z", "+00:00"))
        assert started - timedelta(seconds=1) <= tick_at <= datetime.now(UTC)
    ticks = sorted(json.loads(m.data)["tick_at"] for m in messages)
    assert len(set(ticks)) == len(ticks), "each tick is its own message"
    assert not processes.group_alive(service.pid), "the scheduler left processes behind"
    log = service.log_path.read_text()
    assert READY_LINE in log and "stopped by SIGTERM" in log, log
