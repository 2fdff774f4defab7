"""The delivery bridge against Google's Pub/Sub emulator and a functions-framework server: failed deliveries come
back on the subscription's back-off, a message that keeps failing is dead-lettered by the emulator with Google's
attributes, and a function that was down when the message arrived still gets it."""

from __future__ import annotations

import itertools
import json
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deploy.local import processes, services
from deploy.local.bridge import ACKNOWLEDGED, Bridge, Route, retry_delay
from deploy.topology import RetryPolicy
from tests.conftest import PROJECT, Emulator
from tests.polling import wait_for

pytestmark = pytest.mark.filterwarnings("ignore:The return_immediately flag is deprecated:DeprecationWarning")
FLAKY_SOURCE = Path(__file__).with_name("flaky_function.py")
POLICY = RetryPolicy(minimum_backoff_seconds=1, maximum_backoff_seconds=4)
MAX_ATTEMPTS = 5
PUBLISHED = "google.cloud.pubsub.topic.v1.messagePublished"


def flaky_server(port: int, log: Path) -> processes.ServiceSpec:
    return processes.ServiceSpec(
        name="flaky",
        argv=[
            sys.executable,
            "-m",
            "functions_framework",
            "--target",
            "flaky",
            "--signature-type",
            "cloudevent",
            "--source",
            str(FLAKY_SOURCE),
            "--host",
            services.HOST,
            "--port",
            str(port),
        ],
        port=port,
        env={"PYTHONPATH": str(services.REPO_ROOT), "FLAKY_LOG": str(log)},
        ready_probe=processes.http_answers(f"http://{services.HOST}:{port}/"),
    )


@dataclass
class Wiring:
    """A topic, its subscription (dead-letter policy as the stack provisions it), the bridge pushing from it to
    `port`, and a subscription holding the dead letters."""

    topic: str
    subscription: str
    dead_letters: str
    port: int
    log: Path
    reports: list[str]
    """What the bridge reported (failed deliveries, dead letters), one line each."""

    def deliveries(self, message_id: str) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [e for e in map(json.loads, self.log.read_text().splitlines()) if e["message_id"] == message_id]

    def publish(self, data: bytes, **attributes: str) -> str:
        from google.cloud import pubsub_v1

        # mypy matches **attributes against publish's retry= and timeout= as well, though no key here is either
        future = pubsub_v1.PublisherClient().publish(self.topic, data, **attributes)  # type: ignore[arg-type]
        return str(future.result(timeout=30))

    def pull_dead_letters(self) -> list[Any]:
        from google.cloud import pubsub_v1

        subscriber = pubsub_v1.SubscriberClient()
        response = subscriber.pull(
            request={"subscription": self.dead_letters, "max_messages": 10, "return_immediately": True}, timeout=10
        )
        if response.received_messages:
            subscriber.acknowledge(
                request={"subscription": self.dead_letters, "ack_ids": [m.ack_id for m in response.received_messages]}
            )
        return [m.message for m in response.received_messages]


@pytest.fixture()
def wiring(pubsub_emulator: Emulator, tmp_path: Path) -> Iterator[Wiring]:
    from google.cloud import pubsub_v1

    tag = uuid.uuid4().hex[:8]
    topic, dead = f"projects/{PROJECT}/topics/bridge-{tag}", f"projects/{PROJECT}/topics/bridge-dead-{tag}"
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    for name in (topic, dead):
        publisher.create_topic(name=name)
    subscription = f"projects/{PROJECT}/subscriptions/bridge-{tag}"
    subscriber.create_subscription(
        request={
            "name": subscription,
            "topic": topic,
            "ack_deadline_seconds": 10,
            "dead_letter_policy": {"dead_letter_topic": dead, "max_delivery_attempts": MAX_ATTEMPTS},
        }
    )
    dead_letters = f"projects/{PROJECT}/subscriptions/bridge-dead-{tag}"
    subscriber.create_subscription(request={"name": dead_letters, "topic": dead})
    port = processes.free_port()
    reports: list[str] = []
    bridge = Bridge(
        [
            Route(
                function="flaky",
                subscription=subscription,
                endpoint=f"http://{services.HOST}:{port}/",
                ack_deadline_seconds=10,
                retry=POLICY,
                max_delivery_attempts=MAX_ATTEMPTS,
            )
        ],
        report=reports.append,
    )
    bridge.check_subscriptions()
    bridge.start()
    try:
        yield Wiring(topic, subscription, dead_letters, port, tmp_path / "deliveries.jsonl", reports)
    finally:
        bridge.stop()


@pytest.fixture()
def serve(wiring: Wiring, tmp_path: Path) -> Iterator[Callable[[], None]]:
    """Start the flaky function on the wiring's port (when the test says so)."""
    started: list[processes.RunningService] = []

    def start() -> None:
        started.append(processes.start(flaky_server(wiring.port, wiring.log), tmp_path / "logs"))

    yield start
    processes.stop_all(started)


def gaps(deliveries: list[dict[str, Any]]) -> list[float]:
    return [later["at"] - earlier["at"] for earlier, later in itertools.pairwise(deliveries)]


def test_four_failed_deliveries_are_retried_on_the_back_off_and_a_fifth_failure_dead_letters(
    wiring: Wiring, serve: Callable[[], None]
) -> None:
    serve()
    recovers = wiring.publish(b"recovers", fail_first="4")
    never = wiring.publish(b"never", fail_first="99", kind="poison")
    expected = [retry_delay(POLICY, attempt) for attempt in range(1, MAX_ATTEMPTS)]  # 1, 2, 4, 4 s
    dead = wait_for(wiring.pull_dead_letters, sum(expected) + 20, "the poison message on the dead-letter topic")

    done = wiring.deliveries(recovers)
    assert len(done) == 5, done
    for gap, delay in zip(gaps(done), expected, strict=True):
        assert delay - 0.2 <= gap <= delay + 1.5, (gaps(done), expected)
    assert len(wiring.deliveries(never)) == MAX_ATTEMPTS
    for gap, delay in zip(gaps(wiring.deliveries(never)), expected, strict=True):
        assert delay - 0.2 <= gap <= delay + 1.5, (gaps(wiring.deliveries(never)), expected)

    (letter,) = dead
    assert letter.data == b"never"
    assert letter.attributes["kind"] == "poison" and letter.attributes["fail_first"] == "99"
    assert letter.attributes["CloudPubSubDeadLetterSourceDeliveryCount"] == str(MAX_ATTEMPTS)
    assert letter.attributes["CloudPubSubDeadLetterSourceSubscription"] == wiring.subscription.rsplit("/", 1)[1]
    assert letter.attributes["CloudPubSubDeadLetterSourceSubscriptionProject"] == PROJECT
    # The recovered message was acknowledged once processed: it neither comes back nor goes to the dead letters.
    wait_for(lambda: len(wiring.deliveries(never)) == MAX_ATTEMPTS, 1, "settling")
    assert len(wiring.deliveries(recovers)) == 5
    assert wiring.pull_dead_letters() == []
    # ... and the bridge's log says so, the record e2e tests wait on instead of a back-off.
    acknowledged = ACKNOWLEDGED.format(function="flaky", message_id=recovers, attempt=5)
    wait_for(lambda: any(acknowledged in line for line in wiring.reports), 5, f"the bridge to log {acknowledged!r}")
    assert not [line for line in wiring.reports if f"message {never} attempt" in line and "acknowledged" in line]


def test_a_function_that_was_down_gets_the_message_once_it_is_back(wiring: Wiring, serve: Callable[[], None]) -> None:
    """Google's emulator stops pushing to an endpoint that refused a few pushes; the bridge keeps trying."""
    message_id = wiring.publish(b'{"hello": 1}', source="test")
    refused = f"message {message_id} attempt 2 of {MAX_ATTEMPTS} failed: no answer"
    wait_for(lambda: any(refused in line for line in wiring.reports), 10, "two refused deliveries")
    serve()
    (delivery,) = wait_for(lambda: wiring.deliveries(message_id), 15, "the delivery to the started function")
    assert delivery["type"] == PUBLISHED
    assert json.loads(delivery["data"]) == {"hello": 1}
    assert delivery["attributes"] == {"source": "test"}
    assert delivery["publish_time"].endswith("Z")


def test_a_nine_megabyte_message_is_delivered_and_the_messages_after_it_too(
    wiring: Wiring, serve: Callable[[], None]
) -> None:
    """Pub/Sub takes messages to 10 MB, so the bridge pulls a 9 MB one (past gRPC's default 4 MB receive limit,
    on which its pull once failed every time and nothing on the subscription was delivered again)."""
    serve()
    large = wiring.publish(b"x" * (9 * 1024 * 1024), size="9MB")
    small = wiring.publish(b"after the large one", kind="small")
    said = [ACKNOWLEDGED.format(function="flaky", message_id=m, attempt=1) for m in (large, small)]
    wait_for(lambda: all(any(a in line for line in wiring.reports) for a in said), 60, f"the bridge to log {said}")
    (delivery,) = wiring.deliveries(large)
    assert len(delivery["data"]) == 9 * 1024 * 1024 and delivery["attributes"] == {"size": "9MB"}
    assert [d["data"] for d in wiring.deliveries(small)] == ["after the large one"]
    assert not [line for line in wiring.reports if "pull from" in line and "failed" in line], wiring.reports
