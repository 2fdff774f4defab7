"""The pure parts of Pub/Sub delivery on the local stack: the topology's retry and dead-letter policies, the back-off
table, and the push request the bridge sends (which functions-framework turns into the function's CloudEvent)."""

from __future__ import annotations

import json
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from deploy.local.bridge import (
    ACK_STATUSES,
    PULLS_IN_FLIGHT,
    SCHEDULED_PULLS,
    Pump,
    push_body,
    retry_delay,
    routes_for,
)
from deploy.topology import RetryPolicy, TopologyError, load_topology

TOPOLOGY = Path(__file__).resolve().parents[2] / "deploy" / "topology.toml"


@pytest.mark.parametrize(
    ("minimum", "maximum", "delays"),
    [
        (1, 60, [1, 2, 4, 8, 16, 32, 60, 60]),
        (10, 60, [10, 20, 40, 60, 60]),
        (1, 4, [1, 2, 4, 4]),
        (0, 0, [0, 0]),
        (600, 600, [600, 600]),
    ],
)
def test_back_off_doubles_from_the_minimum_up_to_the_maximum(minimum: int, maximum: int, delays: list[int]) -> None:
    policy = RetryPolicy(minimum_backoff_seconds=minimum, maximum_backoff_seconds=maximum)
    assert [retry_delay(policy, attempt) for attempt in range(1, len(delays) + 1)] == delays


def test_back_off_counts_attempts_from_one() -> None:
    with pytest.raises(ValueError, match="count from 1"):
        retry_delay(RetryPolicy(1, 60), 0)
    assert retry_delay(RetryPolicy(1, 60), 10_000) == 60


def test_only_the_statuses_push_takes_as_an_acknowledgement_acknowledge() -> None:
    assert {102, 200, 201, 202, 204} == ACK_STATUSES
    assert not {203, 205, 301, 302, 400, 404, 409, 429, 500, 503} & ACK_STATUSES


def _message(**fields: Any) -> Any:
    from google.pubsub_v1.types import PubsubMessage

    return PubsubMessage(message_id="42", publish_time=datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC), **fields)


def test_push_request_is_the_one_google_sends() -> None:
    body = push_body(
        _message(data=b'{"a": 1}', attributes={"eventType": "OBJECT_FINALIZE"}), "projects/p/subscriptions/s", 3
    )
    assert body == {
        "message": {
            "data": "eyJhIjogMX0=",
            "attributes": {"eventType": "OBJECT_FINALIZE"},
            "messageId": "42",
            "message_id": "42",
            "publishTime": "2026-01-02T03:04:05.678Z",
            "publish_time": "2026-01-02T03:04:05.678Z",
        },
        "subscription": "projects/p/subscriptions/s",
        "deliveryAttempt": 3,
    }


def test_push_request_leaves_out_what_the_message_lacks_but_always_has_data() -> None:
    body = push_body(_message(), "projects/p/subscriptions/s", 0)
    assert body["message"]["data"] == ""
    assert "attributes" not in body["message"] and "orderingKey" not in body["message"]
    assert "deliveryAttempt" not in body  # only with a dead-letter policy
    assert push_body(_message(ordering_key="k"), "s", 1)["message"]["orderingKey"] == "k"


def test_functions_framework_turns_the_push_request_into_the_functions_cloudevent(tmp_path: Path) -> None:
    import functions_framework

    source = tmp_path / "push_target.py"
    source.write_text(
        "import functions_framework\n"
        "from functions import envelopes\n"
        "SEEN = []\n"
        "@functions_framework.cloud_event\n"
        "def target(event):\n"
        "    SEEN.append((event['type'], envelopes.pubsub_message(event)))\n"
    )
    app = functions_framework.create_app("target", str(source), "cloudevent")
    body = push_body(_message(data=b"payload", attributes={"k": "v"}), "projects/p/subscriptions/s", 2)
    response = app.test_client().post("/", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 200
    ((kind, message),) = sys.modules["push_target"].SEEN  # the module functions-framework loaded from `source`
    assert kind == "google.cloud.pubsub.topic.v1.messagePublished"
    assert (message.data, message.attributes, message.message_id) == (b"payload", {"k": "v"}, "42")
    assert message.publish_time == "2026-01-02T03:04:05.678Z"


def test_every_function_has_a_retry_and_a_dead_letter_policy_within_pubsub_limits() -> None:
    topology = load_topology()
    assert topology.dead_letter_topic in topology.topics
    for route in topology.functions:
        assert 10 <= route.ack_deadline_seconds <= 600
        assert 0 <= route.retry.minimum_backoff_seconds <= route.retry.maximum_backoff_seconds <= 600
        assert 5 <= route.dead_letter.max_delivery_attempts <= 100
        assert route.dead_letter.topic == topology.dead_letter_topic != route.topic
        # Four failed deliveries are retried: there is a fifth.
        assert route.dead_letter.max_delivery_attempts >= 5
    dispatch = topology.function("dispatch")
    patience = sum(retry_delay(dispatch.retry, n) for n in range(1, dispatch.dead_letter.max_delivery_attempts))
    assert patience > 120, "the dispatcher must keep retrying past a crashed delivery's submission lease (120 s)"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "max_delivery_attempts = 15",
            "max_delivery_attempts = 4",
            r"functions.dispatch.dead_letter.max_delivery_attempts` must be a whole number from 5 to 100, got 4",
        ),
        (
            "ack_deadline_seconds = 120",
            "ack_deadline_seconds = 5",
            r"functions.dispatch.ack_deadline_seconds` must be a whole number from 10 to 600, got 5",
        ),
        (
            "retry = { minimum_backoff_seconds = 1, maximum_backoff_seconds = 60 }\n"
            'dead_letter = { topic = "landfall-dead-letter", max_delivery_attempts = 15 }',
            "retry = { minimum_backoff_seconds = 90, maximum_backoff_seconds = 60 }\n"
            'dead_letter = { topic = "landfall-dead-letter", max_delivery_attempts = 15 }',
            r"functions.dispatch.retry: minimum_backoff_seconds \(90\) exceeds maximum_backoff_seconds \(60\)",
        ),
        (
            'dead_letter = { topic = "landfall-dead-letter", max_delivery_attempts = 15 }',
            'dead_letter = { topic = "landfall-job-events", max_delivery_attempts = 15 }',
            r"functions.dispatch.dead_letter.topic is 'landfall-job-events'; "
            r"dead letters go to topics.dead_letter.name",
        ),
        (
            'dead_letter = { topic = "landfall-dead-letter", max_delivery_attempts = 15 }',
            "",
            r"missing `functions.dispatch.dead_letter.topic`",
        ),
    ],
)
def test_a_bad_delivery_policy_is_refused_naming_the_key(tmp_path: Path, old: str, new: str, message: str) -> None:
    text = TOPOLOGY.read_text()
    dispatch = text.index("[functions.dispatch]")
    assert old in text[dispatch:], old
    changed = tmp_path / "topology.toml"
    changed.write_text(text[:dispatch] + text[dispatch:].replace(old, new, 1))
    with pytest.raises(TopologyError, match=message):
        load_topology(changed)


def test_bridge_routes_follow_the_topology_and_refuse_unknown_functions() -> None:
    topology = load_topology()
    routes = routes_for(topology.functions, "proj", {"dispatch": "http://127.0.0.1:1/"})
    assert [(r.function, r.subscription, r.max_delivery_attempts) for r in routes] == [
        ("dispatch", "projects/proj/subscriptions/landfall-training-requests-dispatch", 15)
    ]
    with pytest.raises(ValueError, match=r"unknown functions \['dispach'\]"):
        routes_for(topology.functions, "proj", {"dispach": "http://127.0.0.1:1/"})


def test_a_schedules_subscription_is_pulled_by_one_waiting_pull_the_others_by_several() -> None:
    topology = load_topology()
    scheduled = frozenset(s.topic for s in topology.schedules)
    endpoints = {f.name: "http://127.0.0.1:1/" for f in topology.functions}
    pulls = {r.function: r.pulls for r in routes_for(topology.functions, "proj", endpoints, None, scheduled)}
    assert pulls["sweep_datasets"] == pulls["reconcile_runs"] == SCHEDULED_PULLS == 1
    assert pulls["on_object_finalized"] == pulls["dispatch"] == pulls["on_job_event"] == PULLS_IN_FLIGHT > 1
    (route,) = routes_for(topology.functions, "proj", {"sweep_datasets": "http://127.0.0.1:1/"}, None, scheduled)
    pump = Pump(route, object(), threading.Event(), lambda _: None)
    assert len(pump.threads) == 1


def test_a_push_to_the_path_of_a_teams_topic_tells_the_function_the_topic(tmp_path: Path) -> None:
    """A team's requests subscription pushes to the dispatcher's /projects/P/topics/T (`landfall deploy`, the local
    bridge): functions-framework makes that the event's source, the message's `topic` (docs/teams.md)."""
    import functions_framework

    source = tmp_path / "team_push_target.py"
    source.write_text(
        "import functions_framework\n"
        "from functions import envelopes\n"
        "SEEN = []\n"
        "@functions_framework.cloud_event\n"
        "def target(event):\n"
        "    SEEN.append(envelopes.pubsub_message(event))\n"
    )
    app = functions_framework.create_app("target", str(source), "cloudevent")
    body = push_body(_message(data=b"payload"), "projects/p/subscriptions/landfall-requests-vision-dispatch", 1)
    for path in ("/projects/p/topics/landfall-requests-vision", "/"):
        response = app.test_client().post(path, data=json.dumps(body), content_type="application/json")
        assert response.status_code == 200
    team, shared = sys.modules["team_push_target"].SEEN
    assert team.topic == "projects/p/topics/landfall-requests-vision" and shared.topic == ""
    (route,) = [
        r
        for r in routes_for(
            load_topology().functions,
            "p",
            {"dispatch": "http://127.0.0.1:1/"},
            {"dispatch": [("landfall-requests-vision-dispatch", "landfall-requests-vision")]},
        )
        if r.subscription.endswith("vision-dispatch")
    ]
    assert route.endpoint == "http://127.0.0.1:1/projects/p/topics/landfall-requests-vision"


class _Puller:
    """A subscription whose pulls wait until messages are offered or the client is closed (as a closed gRPC
    channel ends its calls); it records how many pulls wait at once and what they may take."""

    def __init__(self) -> None:
        import threading

        self.lock = threading.Condition()
        self.waiting = 0
        self.most_waiting = 0
        self.asked: list[int] = []
        self.offered: list[Any] = []
        self.closed = False

    def pull(self, request: dict[str, Any], timeout: float, retry: Any) -> Any:
        from types import SimpleNamespace

        with self.lock:
            self.asked.append(request["max_messages"])
            self.waiting += 1
            self.most_waiting = max(self.most_waiting, self.waiting)
            self.lock.notify_all()
            self.lock.wait_for(lambda: self.closed or self.offered, timeout=timeout)
            self.waiting -= 1
            if self.closed:
                raise ValueError("Cannot invoke RPC on closed channel!")
            taken, self.offered = self.offered[: request["max_messages"]], self.offered[request["max_messages"] :]
            return SimpleNamespace(received_messages=taken)

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.lock.notify_all()


def test_several_pulls_wait_at_once_within_the_bound_and_a_stop_ends_them_at_once() -> None:
    """The emulator answers a waiting pull on a tick of its own (about 50 ms): several pulls wait at once so one
    ticks soon after a message lands; together they never take more than max_outstanding, and a stop closes their
    client instead of waiting for them to time out."""
    import threading
    import time

    from deploy.topology import load_topology

    (route,) = routes_for(
        load_topology(TOPOLOGY).functions[:1], "p", {load_topology(TOPOLOGY).functions[0].name: "http://x/"}
    )
    puller, said = _Puller(), list[str]()
    stopping = threading.Event()
    pump = Pump(route, object(), stopping, said.append, max_outstanding=8, puller=puller)
    delivered: list[Any] = []
    release = threading.Event()

    def deliver(received: Any) -> None:
        delivered.append(received)
        release.wait(10)

    pump.deliver = deliver  # type: ignore[method-assign]
    pump.start()
    with puller.lock:
        assert puller.lock.wait_for(lambda: puller.waiting == PULLS_IN_FLIGHT, timeout=10)
    assert sum(puller.asked) <= 8  # the waiting pulls share the bound
    with puller.lock:
        puller.offered = [f"m{i}" for i in range(20)]
        puller.lock.notify_all()
    deadline = time.monotonic() + 10
    while len(delivered) < 8 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    assert len(delivered) == 8  # 8 deliveries in flight: no pull may take more until one ends
    release.set()
    while len(delivered) < 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(delivered) == sorted(f"m{i}" for i in range(20))
    started = time.monotonic()
    stopping.set()
    puller.close()
    pump.join(5)
    assert time.monotonic() - started < 2 and not any(t.is_alive() for t in pump.threads)
    assert pump.idle(5) and said == []  # the closed pulls are not reported as failures
