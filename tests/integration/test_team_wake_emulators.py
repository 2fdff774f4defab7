"""A run's end wakes its team's waiting run, through the real adapters on the Firestore and Pub/Sub emulators
(docs/teams.md, "Waiting and priority"): a team capped at 2 GPUs gets 4 one-GPU requests, 2 are submitted and
2 WAIT team-cap (the second wait decided on a plain read of the ledger, without the ledger in its transaction); the
first run's job ends and the listener records it: its settle frees a GPU and wakes the team's longest-waiting run,
whose request is published again on the requests topic. Delivered to the dispatcher, that request is submitted,
with no reconcile pass; the other run still waits, and the ledger counts the cap exactly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from functions.dispatch.handler import DispatchDeps, handle_training_request
from functions.envelopes import PubSubMessage
from functions.gcp.runs_store import RunsStore
from functions.gcp.team_ledger_store import SettlingRunsStore, TeamLedgerStore
from functions.listener.handler import ListenerDeps, handle_job_event
from functions.records.team_wakes import WOKEN, TeamWaker
from schemas.run_record import RunState
from schemas.training_request import parse_training_request
from tests.conftest import PROJECT, Emulator
from tests.fakes.ingest import Clock
from tests.fakes.teams import churn_team, numbered_request
from tests.fakes.vertex import FakeVertex
from tests.fakes.world import NOW, PLAN, SETTINGS, Outcome, job_event

pytestmark = pytest.mark.filterwarnings("ignore:The return_immediately flag is deprecated:DeprecationWarning")
CAP = 2
TEAMS = churn_team(f"all = {CAP}")
ONE_GPU = replace(PLAN, accelerator_type="NVIDIA_TESLA_T4", accelerator_count=1, replica_count=1)
TOPIC = f"projects/{PROJECT}/topics/team-wake-requests"
TAP = f"projects/{PROJECT}/subscriptions/team-wake-tap"


@pytest.fixture()
def requests_topic(pubsub_emulator: Emulator) -> Iterator[Any]:
    from google.cloud import pubsub_v1

    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    publisher.create_topic(name=TOPIC)
    subscriber.create_subscription(name=TAP, topic=TOPIC)
    yield publisher
    subscriber.delete_subscription(subscription=TAP)
    publisher.delete_topic(topic=TOPIC)
    subscriber.close()


def _request(n: int) -> bytes:
    return numbered_request(n, "wake")


def _pull_all() -> list[bytes]:
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    try:
        response = subscriber.pull(subscription=TAP, max_messages=10, timeout=30)
        if response.received_messages:
            subscriber.acknowledge(subscription=TAP, ack_ids=[m.ack_id for m in response.received_messages])
        return [m.message.data for m in response.received_messages]
    finally:
        subscriber.close()


def test_a_run_ending_wakes_the_teams_waiting_run_without_a_reconcile_pass(
    clean_firestore: Emulator, requests_topic: Any
) -> None:
    from google.cloud import firestore

    client: Any = firestore.Client(project=PROJECT)
    clock = Clock(NOW)
    ledger = TeamLedgerStore(client, SETTINGS.runs_collection, SETTINGS.teams_collection)
    runs = SettlingRunsStore(client, SETTINGS.runs_collection, ledger, now=clock)
    published: list[str] = []

    def hand_over(run: Any) -> None:
        published.append(requests_topic.publish(TOPIC, json.dumps(run.request).encode()).result(timeout=30))

    ledger.waker = TeamWaker(
        teams=lambda: TEAMS,
        ledger_of=ledger.ledger_of,
        waiting_of=ledger.waiting_of,
        runs=RunsStore(client, SETTINGS.runs_collection),
        hand_over=hand_over,
        now=clock,
    ).wake
    vertex = FakeVertex()
    deps = DispatchDeps(
        settings=SETTINGS,
        store=runs,
        vertex=vertex,  # type: ignore[arg-type]
        plan=lambda request: Outcome(ONE_GPU, ()),
        now=clock,
        teams=TEAMS,
        ledger=ledger,
        ingested=lambda request: True,  # ingest's requests (their data dropped under the team's prefix)
    )
    said = []
    for n in range(4):
        said.append(handle_training_request(PubSubMessage(data=_request(n), message_id=f"m-{n}"), deps))
        clock.now += timedelta(seconds=1)
    assert said == ["submitted", "submitted", "waiting:team-cap", "waiting:team-cap"], said
    # Both waits decided on the ledger as plain-read, each run written alone on the version its store created (the
    # claim's conditional path), and the ledger read again after each.
    assert ledger.waits_on_read == 2
    ids = [parse_training_request(_request(n)).run_id for n in range(4)]
    assert ledger.ledgers(["churn"])["churn"].gpus == {"NVIDIA_TESLA_T4": CAP}
    assert published == []

    # The first run's job ends; the listener records it. Its settle frees a GPU and wakes run 2 (waiting longest).
    first = runs.get(ids[0])
    assert first is not None and first.vertex is not None
    vertex.set_state(first.vertex.job_name, "JOB_STATE_SUCCEEDED", start=NOW, end=NOW + timedelta(seconds=10))
    clock.now = NOW + timedelta(seconds=20)
    listener = ListenerDeps(store=runs, vertex=vertex, read_text=lambda uri: None, now=clock)  # type: ignore[arg-type]
    event = PubSubMessage(data=job_event(first.vertex.job_id), message_id="e-1", publish_time=clock.now.isoformat())
    assert handle_job_event(event, listener).startswith("recorded:SUCCEEDED")
    woken = runs.get(ids[2])
    assert woken is not None and woken.state == RunState.SUBMITTING and woken.history[-1].detail.endswith(WOKEN)
    assert len(published) == 1
    still = runs.get(ids[3])
    assert still is not None and still.state == RunState.WAITING

    # The republished request, delivered to the dispatcher, is claimed against the ledger and submitted.
    (data,) = _pull_all()
    assert parse_training_request(data).run_id == ids[2]
    assert handle_training_request(PubSubMessage(data=data, message_id="m-woken"), deps) == "submitted"
    submitted = runs.get(ids[2])
    assert submitted is not None and submitted.state == RunState.SUBMITTED
    assert submitted.team is not None and submitted.team.held
    assert ledger.ledgers(["churn"])["churn"].gpus == {"NVIDIA_TESLA_T4": CAP}
    assert len(vertex.jobs) == 3
    again = runs.get(ids[3])
    assert again is not None and again.state == RunState.WAITING
