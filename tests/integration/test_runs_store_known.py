"""The runs store's conditional write (functions/gcp/runs_store.py apply, functions/gcp/firestore_tx.py
write_if_unchanged), against the Firestore emulator: a run the store wrote itself is changed in one Commit that
holds only while the document is still the one it wrote; when another writer came between, the change is made in a
transaction on the stored document instead, so its step sees the other writer's change and nothing is lost."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from functions.gcp import runs_store as runs_store_module
from functions.gcp.runs_store import RunsStore
from functions.records import run_rules
from functions.records.leases import ClaimOutcome
from schemas.run_record import CancelRequest, RunRecord, RunState, new_run
from tests.conftest import PROJECT

T0 = datetime(2026, 11, 27, 5, 0, tzinfo=UTC)


class CountingClient:
    """The real client, counting the transactions begun through it."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.transactions = 0

    def __getattr__(self, name: str) -> Any:  # everything else is the real client's
        return getattr(self._client, name)

    def collection(self, name: str) -> Any:
        return self._client.collection(name)

    def transaction(self, **kwargs: Any) -> Any:
        self.transactions += 1
        return self._client.transaction(**kwargs)


@pytest.fixture
def client(clean_firestore: Any) -> Any:
    from google.cloud import firestore

    return firestore.Client(project=PROJECT)


def _stored(client: Any, run_id: str) -> dict[str, Any]:
    doc = client.collection("runs").document(run_id).get().to_dict()
    assert doc is not None
    return dict(doc)


def test_a_run_the_store_just_wrote_is_changed_without_a_transaction(client: Any) -> None:
    counting = CountingClient(client)
    store = RunsStore(counting, "runs")
    _, created = store.create_if_absent(new_run("run-k1", {"task": "t"}, now=T0))
    assert created
    planned, moved = store.transition("run-k1", RunState.PLANNED, now=T0 + timedelta(seconds=1), detail="p")
    claim = store.claim_submission("run-k1", owner="me", now=T0 + timedelta(seconds=2), lease_seconds=60)
    assert moved and planned is not None and claim.outcome == ClaimOutcome.CLAIMED
    assert counting.transactions == 0, "each change was one conditional Commit on the copy the store wrote"
    assert _stored(client, "run-k1") == claim.doc.to_document()
    assert store.get("run-k1") == claim.doc


def test_another_writer_between_makes_the_change_a_transaction_that_sees_it(client: Any) -> None:
    counting = CountingClient(client)
    mine, theirs = RunsStore(counting, "runs"), RunsStore(client, "runs")
    mine.create_if_absent(new_run("run-k2", {"task": "t"}, now=T0))
    cancel = CancelRequest(by="someone@example.com", at="2026-11-27T05:00:01Z")
    theirs.merge("run-k2", lambda r: replace(r, submission=replace(r.submission, cancel=cancel)), now=T0)

    seen: list[RunRecord | None] = []

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, bool]:
        seen.append(cur)
        return (None if cur is None else replace(cur, metrics={"m": 1})), True

    assert mine.apply("run-k2", step)
    assert counting.transactions == 1, "the conditional Commit was refused, and the change made in a transaction"
    assert seen[0] is not None and seen[0].submission.cancel is None, "first tried on the copy this store wrote"
    assert seen[-1] is not None and seen[-1].submission.cancel == cancel, "then on the stored document"
    stored = mine.get("run-k2")
    assert stored is not None and stored.submission.cancel == cancel and stored.metrics == {"m": 1}


def test_a_step_that_writes_nothing_is_decided_on_the_stored_document(client: Any) -> None:
    counting = CountingClient(client)
    mine, theirs = RunsStore(counting, "runs"), RunsStore(client, "runs")
    mine.create_if_absent(new_run("run-k3", {"task": "t"}, now=T0))
    theirs.transition("run-k3", RunState.REJECTED, now=T0, detail="refused elsewhere")
    # From RECEIVED (the copy) PLANNED is allowed; from REJECTED (the stored run) it is not.
    after, moved = mine.transition("run-k3", RunState.PLANNED, now=T0)
    assert not moved and after is not None and after.state == RunState.REJECTED
    assert counting.transactions == 1


def test_a_copy_older_than_its_time_is_not_used(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    counting = CountingClient(client)
    store = RunsStore(counting, "runs")
    store.create_if_absent(new_run("run-k4", {"task": "t"}, now=T0))
    monkeypatch.setattr(runs_store_module, "KNOWN_FOR_S", 0.0)
    store.merge("run-k4", lambda r: replace(r, metrics={"m": 2}), now=T0)
    assert counting.transactions == 1


def test_forget_drops_the_copy(client: Any) -> None:
    counting = CountingClient(client)
    store = RunsStore(counting, "runs")
    store.create_if_absent(new_run("run-k5", {"task": "t"}, now=T0))
    store.forget("run-k5")
    store.apply("run-k5", run_rules.merge(now=T0, change=lambda r: replace(r, metrics={"m": 3})))
    assert counting.transactions == 1
    # and the transaction's write is remembered in turn: the next change is one Commit again
    store.apply("run-k5", run_rules.merge(now=T0, change=lambda r: replace(r, metrics={"m": 4})))
    assert counting.transactions == 1
    assert _stored(client, "run-k5")["metrics"] == {"m": 4}
