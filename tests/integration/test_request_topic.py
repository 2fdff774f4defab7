"""The requests topic as provisioned, through the stock google-cloud-pubsub client: a minimal TrainingRequest
(dataset URI, task, preset) is published and read back with the defaults applied; the full golden example too.

Google's Pub/Sub emulator (0.8.x) answers "Protocol buffer support not implemented" to the topic's schema, so on it
the topic carries none and a malformed message is not refused at publish time (tests/unit/test_schemas.py holds the
schema to protobuf's JSON rules instead); the refusal test runs wherever the schema is attached."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from schemas.training_request import parse_training_request
from tests.conftest import PROJECT, Emulator

pytestmark = pytest.mark.filterwarnings("ignore:The return_immediately flag is deprecated:DeprecationWarning")
GOLDEN = Path(__file__).resolve().parents[2] / "schemas" / "examples" / "training_request.json"
MINIMAL = {
    "dataset": {"uri": "gs://landfall-landing/datasets/minimal/"},
    "task": "tabular-classification",
    "model": {"preset": "mlp-small"},
}


@pytest.fixture(scope="module")
def topic(pubsub_emulator: Emulator) -> Iterator[tuple[str, bool, Any]]:
    from google.cloud import pubsub_v1

    from deploy.local import provision
    from deploy.topology import load_topology

    topology = load_topology()
    attached = provision.create_topics(topology, PROJECT)
    name = f"projects/{PROJECT}/topics/{topology.requests_topic}"
    subscriber = pubsub_v1.SubscriberClient()
    subscription = f"projects/{PROJECT}/subscriptions/request-topic-tap"
    subscriber.create_subscription(name=subscription, topic=name)
    yield name, attached, subscriber
    subscriber.delete_subscription(subscription=subscription)
    subscriber.close()


def _read_one(subscriber: Any) -> bytes:
    subscription = f"projects/{PROJECT}/subscriptions/request-topic-tap"
    response = subscriber.pull(subscription=subscription, max_messages=1, timeout=30)
    (received,) = response.received_messages
    subscriber.acknowledge(subscription=subscription, ack_ids=[received.ack_id])
    data: bytes = received.message.data
    return data


VALUE_OF_TIME = MINIMAL | {"constraints": {"prefer": "25"}}
"""A request naming its objective (constraints.prefer: a value of time in dollars per hour, as a string)."""


@pytest.mark.parametrize(
    "body", [MINIMAL, json.loads(GOLDEN.read_text()), VALUE_OF_TIME], ids=["minimal", "golden", "prefer"]
)
def test_stock_client_publishes_a_request_the_dispatcher_reads(topic: tuple[str, bool, Any], body: dict) -> None:
    from google.cloud import pubsub_v1

    name, _, subscriber = topic
    pubsub_v1.PublisherClient().publish(name, json.dumps(body).encode()).result(timeout=30)
    request = parse_training_request(_read_one(subscriber))
    assert request.dataset.uri == body["dataset"]["uri"]
    if body is MINIMAL:
        assert request.hyperparameters.epochs == 5 and request.idempotency_key.startswith("content:")
    assert request.constraints.prefer == body.get("constraints", {}).get("prefer", "")


def test_provisioning_says_whether_the_schema_is_attached(topic: tuple[str, bool, Any]) -> None:
    from google.cloud import pubsub_v1

    name, attached, _ = topic
    assert bool(pubsub_v1.PublisherClient().get_topic(topic=name).schema_settings.schema) == attached


def test_malformed_request_is_refused_at_publish_time(topic: tuple[str, bool, Any]) -> None:
    from google.api_core.exceptions import InvalidArgument
    from google.cloud import pubsub_v1

    name, attached, _ = topic
    if not attached:
        pytest.skip(
            "the Pub/Sub emulator answers 501 'Protocol buffer support not implemented' to the schema, so the "
            "topic has none and refuses nothing; tests/unit/test_schemas.py holds this body to the schema"
        )
    with pytest.raises(InvalidArgument):
        pubsub_v1.PublisherClient().publish(name, b'{"dataset": {"object_count": "four"}}').result(timeout=30)
