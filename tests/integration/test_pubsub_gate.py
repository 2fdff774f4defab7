"""The local stack's Pub/Sub gate, through the real google-cloud-pubsub client over the Pub/Sub emulator: a publish
naming an identity is held to that identity's grants and refused as Pub/Sub refuses it (PERMISSION_DENIED, raised as
PermissionDenied); a grant removed from the topology is refused the same way; the owner's calls, and every other
method (a subscription made, a streaming pull), pass through; each decision is recorded with the grant it used."""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.api_core.exceptions import AlreadyExists, PermissionDenied
from google.cloud import pubsub_v1
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport
from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

from deploy.local_iam.pubsub_gate import serve
from deploy.local_iam.storage_gate import Decisions
from deploy.topology import load_topology
from functions.gcp.clients import principal_channel
from tests.conftest import Emulator
from tests.integration.test_storage_gate import INGEST, PROJECT, _Switch, policy, without_grant

TOPOLOGY = load_topology()
LISTENER = f"serviceAccount:landfall-listener@{PROJECT}.iam.gserviceaccount.com"


@pytest.fixture(scope="module")
def gate(pubsub_emulator: Emulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, _Switch, Path]]:
    owner = pubsub_v1.PublisherClient()
    for topic in (TOPOLOGY.requests_topic, TOPOLOGY.run_results_topic):
        path = owner.topic_path(PROJECT, topic)
        with contextlib.suppress(AlreadyExists):  # made by an earlier test of the session
            owner.create_topic(name=path)
    switch = _Switch()
    record = tmp_path_factory.mktemp("pubsub-gate") / "used.jsonl"
    server, port = serve(
        0, pubsub_emulator.endpoint.removeprefix("http://"), Decisions(switch, record=record).decide_resource
    )
    try:
        yield f"127.0.0.1:{port}", switch, record
    finally:
        server.stop(grace=0)


def _publisher(gate: str, member: str = "") -> Any:
    channel = principal_channel(gate, member) if member else grpc.insecure_channel(gate)
    return pubsub_v1.PublisherClient(transport=PublisherGrpcTransport(channel=channel))


def _topic(name: str) -> str:
    return f"projects/{PROJECT}/topics/{name}"


def test_an_identity_publishes_where_it_is_granted_and_is_refused_as_pubsub_refuses_elsewhere(
    gate: tuple[str, _Switch, Path],
) -> None:
    host, switch, record = gate
    switch.current = policy()
    ingest = _publisher(host, INGEST)
    assert ingest.publish(_topic(TOPOLOGY.requests_topic), b"{}").result(timeout=30)
    # ingest holds no publisher role on the run results topic: the listener does
    with pytest.raises(PermissionDenied, match="User not authorized to perform this action"):
        ingest.publish(_topic(TOPOLOGY.run_results_topic), b"{}").result(timeout=30)
    assert _publisher(host, LISTENER).publish(_topic(TOPOLOGY.run_results_topic), b"{}").result(timeout=30)
    assert _publisher(host).publish(_topic(TOPOLOGY.run_results_topic), b"{}").result(timeout=30)  # the owner
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    used = [x for x in lines if x["member"] == INGEST and x["allowed"]]
    assert {"member": INGEST, "permission": "pubsub.topics.publish", "allowed": True} | {
        "role": "roles/pubsub.publisher",
        "resource": TOPOLOGY.requests_topic,
    } in used
    refused = [x for x in lines if x["member"] == INGEST and not x["allowed"]]
    assert refused == [
        {
            "member": INGEST,
            "permission": "pubsub.topics.publish",
            "allowed": False,
            "kind": "topic",
            "name": TOPOLOGY.run_results_topic,
        }
    ]


def test_a_grant_removed_from_the_topology_is_refused_through_the_client_library(
    gate: tuple[str, _Switch, Path],
) -> None:
    host, switch, _ = gate
    switch.current = policy(without_grant("ingest", "roles/pubsub.publisher", "topic:training_requests"))
    try:
        with pytest.raises(PermissionDenied, match="User not authorized to perform this action"):
            _publisher(host, INGEST).publish(_topic(TOPOLOGY.requests_topic), b"{}").result(timeout=30)
    finally:
        switch.current = policy()


def test_other_calls_and_a_streaming_pull_pass_through(gate: tuple[str, _Switch, Path]) -> None:
    host, switch, _ = gate
    switch.current = policy()
    subscriber = pubsub_v1.SubscriberClient(transport=SubscriberGrpcTransport(channel=grpc.insecure_channel(host)))
    name = subscriber.subscription_path(PROJECT, f"gate-{uuid.uuid4().hex[:8]}")
    subscriber.create_subscription(name=name, topic=_topic(TOPOLOGY.requests_topic))
    got: list[bytes] = []
    arrived = threading.Event()

    def take(message: Any) -> None:
        got.append(message.data)
        message.ack()
        arrived.set()

    future = subscriber.subscribe(name, take)
    try:
        _publisher(host, INGEST).publish(_topic(TOPOLOGY.requests_topic), b"through the gate").result(timeout=30)
        assert arrived.wait(30), "the streaming pull through the gate delivered nothing"
        assert got == [b"through the gate"]
    finally:
        future.cancel()
        subscriber.delete_subscription(subscription=name)
