"""RunFinished on the run-results topic: one per run, from the listener when the run ends; a publish that failed is
made good by the reconciler (ended runs whose flag is still False), and a repeated delivery publishes nothing."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import NoReturn

import pytest

from functions.errors import TransientError
from functions.reconciler.handler import reconcile
from functions.records.results import ANNOUNCE_LEASE, announce, claimed_announcement
from schemas.errors import SchemaError
from schemas.run_finished import RunFinished, parse_run_finished, run_finished
from schemas.run_record import RunState
from tests.fakes.world import NOW, World
from tests.unit.test_runs_end_true import job_id, reconciler, submitted

EXAMPLE = Path(__file__).resolve().parents[2] / "schemas" / "examples" / "run_finished.json"


class Topic:
    """The run-results topic: what was published; `down` makes the next publishes fail as Pub/Sub would."""

    def __init__(self) -> None:
        self.messages: list[RunFinished] = []
        self.down = 0

    def publish(self, message: RunFinished) -> str:
        if self.down:
            self.down -= 1
            raise TransientError("Pub/Sub run results unavailable; will retry")
        self.messages.append(parse_run_finished(message.to_bytes()))  # what a subscriber reads
        return str(len(self.messages))


def announcing(w: World, topic: Topic) -> None:
    w.listener_deps = replace(
        w.listener_deps, announce=lambda run_id: announce(run_id, w.runs, topic.publish, now=lambda: NOW)
    )


def ended(w: World, name: str) -> None:
    w.objects[f"{w.model_dir()}metrics.json"] = '{"final": {"loss": 0.1}}'
    w.vertex.set_state(name, "JOB_STATE_SUCCEEDED", start=NOW, end=NOW + timedelta(minutes=1))


def test_the_golden_run_finished_round_trips() -> None:
    golden = json.loads(EXAMPLE.read_text())
    assert parse_run_finished(EXAMPLE.read_bytes()).to_dict() == golden
    with pytest.raises(SchemaError, match=r"run_finished\.state"):
        parse_run_finished(json.dumps({**golden, "state": "RUNNING"}))


def test_a_run_that_ends_is_announced_once_even_when_its_event_comes_twice() -> None:
    w, name = submitted()
    topic = Topic()
    announcing(w, topic)
    ended(w, name)
    assert w.job_event(job_id(name)) == "recorded:SUCCEEDED"
    assert w.job_event(job_id(name)).endswith(":SUCCEEDED")  # the same event again
    [message] = topic.messages
    assert (message.run_id, message.state, message.reason) == (w.run().run_id, "SUCCEEDED", "")
    assert message.metrics == {"final": {"loss": 0.1}} and message.artifacts["model_dir"].startswith("gs://")
    assert message == run_finished(w.run()) and w.run().submission.results_published is True
    assert (
        reconcile(replace(reconciler(w), unannounced=w.runs.unannounced, announce=w.listener_deps.announce))
        == "no open runs"
    )
    assert len(topic.messages) == 1


def test_a_publish_that_failed_is_retried_by_the_delivery_or_made_good_by_the_reconciler() -> None:
    w, name = submitted()
    topic = Topic()
    announcing(w, topic)
    ended(w, name)
    topic.down = 1
    with pytest.raises(TransientError):
        w.job_event(job_id(name))  # the run is recorded SUCCEEDED, the message is not out: the delivery is retried
    assert w.run().state == RunState.SUCCEEDED and w.run().submission.results_published is False
    deps = replace(reconciler(w), unannounced=w.runs.unannounced, announce=w.listener_deps.announce)
    assert reconcile(deps) == "announced=1"
    assert reconcile(deps) == "no open runs"
    assert w.job_event(job_id(name)).endswith(":SUCCEEDED")  # the redelivery finds the flag set
    assert [m.state for m in topic.messages] == ["SUCCEEDED"]


def test_a_run_cancelled_before_submission_is_announced_by_the_reconciler() -> None:
    from functions.reconciler.cancel import cancel_run
    from tests.unit.test_runs_end_true import stockout

    w, name = submitted()
    for _ in range(3):  # every plan refused for capacity: the run WAITS, with no job
        stockout(w, name)
        name = w.job_name() if w.run().vertex else name
    said = cancel_run(w.run().run_id, by="ada", store=w.runs, vertex=w.vertex, now=NOW)  # type: ignore[arg-type]
    assert said.endswith("CANCELLED while it waited for capacity (no job was running)")
    assert w.run().submission.results_published is False
    topic = Topic()
    deps = replace(
        reconciler(w),
        unannounced=w.runs.unannounced,
        announce=lambda run_id: announce(run_id, w.runs, topic.publish, now=lambda: NOW),
    )
    assert reconcile(deps) == "announced=1" and reconcile(deps) == "no open runs"
    assert [(m.state, m.reason) for m in topic.messages] == [("CANCELLED", "cancelled")]


def test_two_deliveries_that_see_the_run_end_at_once_publish_it_once() -> None:
    """The listener's duplicated event and a reconcile pass both find the flag False: the lease lets one publish."""
    w, name = submitted()
    topic = Topic()
    said: list[str] = []

    def publish_while_another_delivery_arrives(message: RunFinished) -> str:
        said.append(announce(message.run_id, w.runs, topic.publish, now=lambda: NOW))  # the other delivery
        return topic.publish(message)

    w.listener_deps = replace(
        w.listener_deps,
        announce=lambda run_id: announce(run_id, w.runs, publish_while_another_delivery_arrives, now=lambda: NOW),
    )
    ended(w, name)
    assert w.job_event(job_id(name)) == "recorded:SUCCEEDED"
    assert said == ["announcing-elsewhere"] and len(topic.messages) == 1
    assert w.run().submission.results_published is True


def test_an_announcer_that_died_after_its_claim_is_taken_over_once_its_lease_lapses() -> None:
    w, name = submitted()
    topic = Topic()
    ended(w, name)
    w.job_event(job_id(name))  # recorded SUCCEEDED; no announcer wired: the flag stays False
    run_id = w.run().run_id
    assert w.runs.apply(run_id, claimed_announcement(now=NOW))[0] == "claimed"  # then the claimer dies
    assert announce(run_id, w.runs, topic.publish, now=lambda: NOW + ANNOUNCE_LEASE / 2) == "announcing-elsewhere"
    assert announce(run_id, w.runs, topic.publish, now=lambda: NOW + ANNOUNCE_LEASE).startswith("announced:")
    assert [m.run_id for m in topic.messages] == [run_id]


def test_a_copy_of_an_event_already_recorded_and_announced_opens_no_transaction() -> None:
    """Replayed job events arrive together; once the run is recorded and announced a copy ends on a plain read (on
    the Firestore emulator sixteen transactions at once on one run kept colliding for minutes)."""
    w, name = submitted()
    topic = Topic()
    announcing(w, topic)
    ended(w, name)
    assert w.job_event(job_id(name)) == "recorded:SUCCEEDED"

    def no_transaction(run_id: str, step: object) -> NoReturn:
        raise AssertionError("a transaction was opened for a copy of an event already recorded")

    w.runs.apply = no_transaction  # type: ignore[method-assign]
    assert w.job_event(job_id(name)) == "duplicate:SUCCEEDED"
    assert len(topic.messages) == 1


def _unreadable(change: dict[str, object]) -> bytes:
    from tests.fakes.world import REQUEST_JSON

    raw = json.loads(REQUEST_JSON)
    for key, value in change.items():
        if key == "learning_rate":
            raw["hyperparameters"]["learning_rate"] = value
        else:
            raw[key] = value
    return json.dumps(raw).encode()  # json.dumps writes NaN as the bare NaN token, as a hand-written message may


@pytest.mark.parametrize(
    "change",
    [{"learning_rate": float("nan")}, {"idempotency_key": "k" * 10_000}],
    ids=["nan-learning-rate", "10kb-key"],
)
def test_a_run_rejected_because_its_request_could_not_be_read_is_announced(change: dict[str, object]) -> None:
    """A run stored REJECTED straight away (its request unreadable) is announced too: without a results_published
    flag the reconciler's look for unannounced runs would never find it, and no RunFinished would go out."""
    w = World()
    assert w.deliver(_unreadable(change), message_id="m-bad") == "rejected:invalid-request"
    (run,) = (w.run(run_id) for run_id in w.runs.docs)
    assert run.state == RunState.REJECTED and run.submission.results_published is False
    topic = Topic()
    deps = replace(
        reconciler(w),
        unannounced=w.runs.unannounced,
        announce=lambda run_id: announce(run_id, w.runs, topic.publish, now=lambda: NOW),
    )
    assert reconcile(deps) == "announced=1" and reconcile(deps) == "no open runs"
    [message] = topic.messages
    assert (message.run_id, message.state, message.reason) == (run.run_id, "REJECTED", "invalid-request")
    assert message.message and w.run(run.run_id).submission.results_published is True
