"""The runs store's conditional write (functions/gcp/unit_of_work.py, under functions/gcp/runs_store.py apply),
against the Firestore emulator: a run the store wrote itself is changed in one Commit that
holds only while the document is still the one it wrote; when another writer came between, the change is made in a
transaction on the stored document instead, so its step sees the other writer's change and nothing is lost."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from functions.gcp import unit_of_work as unit_of_work_module
from functions.gcp.runs_store import RunsStore
from functions.gcp.unit_of_work import UnitOfWork
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
    monkeypatch.setattr(unit_of_work_module, "KNOWN_FOR_S", 0.0)
    store.merge("run-k4", lambda r: replace(r, metrics={"m": 2}), now=T0)
    assert counting.transactions == 1


def test_forget_drops_the_copy(client: Any) -> None:
    counting = CountingClient(client)
    store = RunsStore(counting, "runs")
    store.create_if_absent(new_run("run-k5", {"task": "t"}, now=T0))
    store.work.forget("run-k5")
    store.apply("run-k5", run_rules.merge(now=T0, change=lambda r: replace(r, metrics={"m": 3})))
    assert counting.transactions == 1
    # and the transaction's write is remembered in turn: the next change is one Commit again
    store.apply("run-k5", run_rules.merge(now=T0, change=lambda r: replace(r, metrics={"m": 4})))
    assert counting.transactions == 1
    assert _stored(client, "run-k5")["metrics"] == {"m": 4}


def _slot_region(result: object) -> str | None:
    return "us-central1" if getattr(result, "outcome", None) == ClaimOutcome.CLAIMED else None


def _bucket(client: Any) -> dict[str, Any] | None:
    from schemas.rate_bucket import CREATE_CUSTOM_JOB, bucket_id

    found = client.collection("rate_limits").document(bucket_id(CREATE_CUSTOM_JOB, "us-central1")).get()
    return dict(found.to_dict()) if found.exists else None


def test_a_limiter_slot_rides_in_the_claims_commit(client: Any) -> None:
    """The dispatcher's first submission slot is taken in the claim's own Commit (functions/gcp/unit_of_work.py, the
    rate limits store its Riding): one call, the slot taken if and only if the claim is written; the same slot a take
    would give."""
    from functions.gcp.rate_limits_store import RateLimitsStore
    from functions.records.rate_limits import slot_of

    counting = CountingClient(client)
    now = datetime.now(UTC)
    limiter = RateLimitsStore(client, "rate_limits", per_minute=60)
    work = UnitOfWork(counting, "runs", slots=limiter, slot_region=_slot_region, now=lambda: now)
    store = RunsStore(counting, "runs", work)
    store.create_if_absent(new_run("run-k6", {"task": "t"}, now=T0))
    store.transition("run-k6", RunState.PLANNED, now=T0, detail="p")
    claim = store.claim_submission("run-k6", owner="me", now=now, lease_seconds=60)
    assert claim.outcome == ClaimOutcome.CLAIMED and counting.transactions == 0
    bucket = _bucket(client)
    taken = limiter.taken_with_claim("run-k6")
    assert bucket is not None and taken is not None and taken[0] == "us-central1"
    assert taken[1] == slot_of(bucket["next_slot_us"], 60)
    assert abs((taken[1] - now).total_seconds()) < 1.5, "the bucket was empty: the first slot is now"
    assert limiter.take("us-central1", now) > taken[1], "the next take is one interval on from the ridden one"
    assert limiter.taken_with_claim("run-k6") is None, "handed over once"

    # A claim that writes nothing (another owner's live lease) takes no slot.
    before = _bucket(client)
    assert store.claim_submission("run-k6", owner="you", now=now, lease_seconds=60).outcome in (
        ClaimOutcome.BUSY,
        ClaimOutcome.DONE,
    )
    assert limiter.taken_with_claim("run-k6") is None and _bucket(client) == before


def test_a_claim_made_in_a_transaction_takes_no_slot_with_it(client: Any) -> None:
    from functions.gcp.rate_limits_store import RateLimitsStore

    counting = CountingClient(client)
    limiter = RateLimitsStore(client, "rate_limits", per_minute=60)
    work = UnitOfWork(counting, "runs", slots=limiter, slot_region=_slot_region, now=lambda: T0)
    mine, theirs = RunsStore(counting, "runs", work), RunsStore(client, "runs")
    mine.create_if_absent(new_run("run-k7", {"task": "t"}, now=T0))
    mine.transition("run-k7", RunState.PLANNED, now=T0, detail="p")
    theirs.merge("run-k7", lambda r: replace(r, metrics={"m": 5}), now=T0)  # another writer between
    claim = mine.claim_submission("run-k7", owner="me", now=T0, lease_seconds=60)
    assert claim.outcome == ClaimOutcome.CLAIMED and counting.transactions == 1
    assert limiter.taken_with_claim("run-k7") is None and _bucket(client) is None, "the dispatcher takes it itself"


def _pair_merge(metrics: dict[str, Any]) -> Any:
    """A team ledger step that changes the run (its metrics) and writes a ledger of its own."""
    from schemas.team_ledger import TeamLedger

    def step(run: RunRecord | None, ledger: TeamLedger | None) -> tuple[RunRecord | None, Any, bool]:
        assert run is not None
        return replace(run, metrics=metrics), ledger or TeamLedger(team="t1"), True

    return step


@pytest.mark.parametrize("busy", [False, True], ids=["over-both", "on-read-ledger"])
def test_a_run_the_team_ledger_wrote_is_changed_next_without_a_transaction(client: Any, busy: bool) -> None:
    """The dispatcher's claim of a team's run is the ledger's transaction; the unit of work the stores share keeps the
    run as that transaction left it, so the job's record after it is one conditional Commit, not a transaction of three
    calls."""
    from functions.gcp.team_ledger_store import TeamLedgerStore

    counting = CountingClient(client)
    work = UnitOfWork(counting, "runs")
    store = RunsStore(counting, "runs", work)
    ledger = TeamLedgerStore(client, "runs", "teams", work=work)
    store.create_if_absent(new_run("run-k8", {"task": "t"}, now=T0))
    ledger.apply("run-k8", "t1", _pair_merge({"m": 1}))  # the ledger exists
    if busy:  # as after a claim of the team went WAITING: the plain-read ledger first, the run alone in a transaction
        ledger._waited_at["t1"] = time.monotonic()
        step = lambda run, team: (None if run is None else replace(run, metrics={"m": 2}), None, True)  # noqa: E731
    else:
        step = _pair_merge({"m": 2})
    store.work.forget("run-k8")  # the ledger's own transaction, not a Commit on the copy
    assert ledger.apply("run-k8", "t1", step)
    after_ledger = counting.transactions
    store.merge("run-k8", lambda r: replace(r, metrics={**(r.metrics or {}), "n": 3}), now=T0)
    assert counting.transactions == after_ledger, "the ledger's write was remembered: one conditional Commit"
    assert _stored(client, "run-k8")["metrics"] == {"m": 2, "n": 3}


def test_a_run_the_team_ledger_did_not_change_is_remembered_as_read(client: Any) -> None:
    from functions.gcp.team_ledger_store import TeamLedgerStore

    counting = CountingClient(client)
    work = UnitOfWork(counting, "runs")
    store, ledger = RunsStore(counting, "runs", work), TeamLedgerStore(client, "runs", "teams", work=work)
    store.create_if_absent(new_run("run-k9", {"task": "t"}, now=T0))
    RunsStore(client, "runs").merge("run-k9", lambda r: replace(r, metrics={"other": 1}), now=T0)  # store's copy old
    assert not ledger.apply("run-k9", "t1", lambda run, team: (None, None, False))
    after_ledger = counting.transactions
    store.merge("run-k9", lambda r: replace(r, metrics={**(r.metrics or {}), "n": 1}), now=T0)
    assert counting.transactions == after_ledger and _stored(client, "run-k9")["metrics"] == {"other": 1, "n": 1}


def _admit(metrics: dict[str, Any], reserved: str = "r") -> tuple[Any, list[RunRecord | None]]:
    """A team ledger step that writes both documents (the run's metrics, and the ledger's updated_at), and the runs
    it was given."""
    from schemas.team_ledger import TeamLedger

    seen: list[RunRecord | None] = []

    def step(run: RunRecord | None, ledger: TeamLedger | None) -> tuple[RunRecord | None, Any, str]:
        seen.append(run)
        assert run is not None
        return (
            replace(run, metrics={**(run.metrics or {}), **metrics}),
            replace(ledger or TeamLedger(team="t1"), updated_at=f"2026-11-27T07:00:0{len(seen)}Z"),
            reserved,
        )

    return step, seen


def test_a_claim_on_the_known_run_and_the_ledger_is_one_commit_with_its_slot(client: Any) -> None:
    """The dispatcher's team claim right after it created the run: no transaction, the run and the ledger written in
    one Commit with the submission slot, and the run kept for the next conditional write."""
    from functions.gcp.rate_limits_store import RateLimitsStore
    from functions.gcp.team_ledger_store import TeamLedgerStore

    runs_client, ledger_client = CountingClient(client), CountingClient(client)
    limiter = RateLimitsStore(client, "rate_limits", per_minute=60)
    now = datetime.now(UTC)
    work = UnitOfWork(runs_client, "runs", slots=limiter, slot_region=lambda _: "us-central1", now=lambda: now)
    store, ledger = RunsStore(runs_client, "runs", work), TeamLedgerStore(ledger_client, "runs", "teams", work=work)
    store.create_if_absent(new_run("run-k10", {"task": "t"}, now=T0))
    said = ledger.apply("run-k10", "t1", _admit({"claimed": 1})[0])
    assert said == "r" and ledger_client.transactions == 0 and runs_client.transactions == 0
    assert _stored(client, "run-k10")["metrics"] == {"claimed": 1}
    assert client.collection("teams").document("t1").get().to_dict()["updated_at"] == "2026-11-27T07:00:01Z"
    assert limiter.taken_with_claim("run-k10") is not None and _bucket(client) is not None
    store.merge("run-k10", lambda r: replace(r, metrics={**(r.metrics or {}), "job": 1}), now=T0)
    assert runs_client.transactions == 0 and _stored(client, "run-k10")["metrics"] == {"claimed": 1, "job": 1}


def test_a_run_changed_since_the_copy_makes_the_claim_a_transaction_that_sees_it(client: Any) -> None:
    from functions.gcp.rate_limits_store import RateLimitsStore
    from functions.gcp.team_ledger_store import TeamLedgerStore

    ledger_client = CountingClient(client)
    limiter = RateLimitsStore(client, "rate_limits", per_minute=60)
    work = UnitOfWork(ledger_client, "runs", slots=limiter, slot_region=lambda _: "us-central1", now=lambda: T0)
    store, ledger = RunsStore(client, "runs", work), TeamLedgerStore(ledger_client, "runs", "teams", work=work)
    store.create_if_absent(new_run("run-k11", {"task": "t"}, now=T0))
    RunsStore(client, "runs").merge("run-k11", lambda r: replace(r, metrics={"other": 1}), now=T0)
    step, seen = _admit({"claimed": 1})
    assert ledger.apply("run-k11", "t1", step) == "r"
    assert ledger_client.transactions == 1, "the Commit was refused, and the claim made in the transaction"
    assert [(r.metrics or {}) if r else "absent" for r in seen] == [{}, {"other": 1}], "the copy, then as stored"
    assert _stored(client, "run-k11")["metrics"] == {"other": 1, "claimed": 1}
    assert client.collection("teams").document("t1").get().to_dict()["updated_at"] == "2026-11-27T07:00:02Z"
    assert limiter.taken_with_claim("run-k11") is None and _bucket(client) is None, "nothing of the refused Commit"


def test_a_run_found_by_its_create_is_claimed_in_one_commit(client: Any) -> None:
    """A redelivery (or a woken run's delivery) finds the run by its create's refusal and the read after it; the store
    keeps that read like its own write, so the claim that follows is one conditional Commit too."""
    first, counting = RunsStore(client, "runs"), CountingClient(client)
    first.create_if_absent(new_run("run-k12", {"task": "t"}, now=T0))
    first.transition("run-k12", RunState.PLANNED, now=T0, detail="p")
    again = RunsStore(counting, "runs")
    found, created = again.create_if_absent(new_run("run-k12", {"task": "t"}, now=T0 + timedelta(seconds=5)))
    assert not created and found.state == RunState.PLANNED
    claim = again.claim_submission("run-k12", owner="me", now=T0 + timedelta(seconds=6), lease_seconds=60)
    assert claim.outcome == ClaimOutcome.CLAIMED and counting.transactions == 0
    assert _stored(client, "run-k12") == claim.doc.to_document()


def test_a_claim_that_waits_on_the_known_run_is_one_commit_and_the_ledger_is_read_again(client: Any) -> None:
    """A claim the ledger (as read) sends WAITING writes the run alone, on its known version, and no ledger; the
    ledger is then read again, and a change since wakes the team's waiting runs (as a wait on a plain-read ledger)."""
    from functions.gcp.team_ledger_store import TeamLedgerStore
    from schemas.run_record import Waiting
    from schemas.team_ledger import TeamLedger
    from schemas.vocabulary import TEAM_CAP

    ledger_client = CountingClient(client)
    work = UnitOfWork(ledger_client, "runs")
    store, ledger = RunsStore(client, "runs", work), TeamLedgerStore(ledger_client, "runs", "teams", work=work)
    woken: list[str] = []

    def wake(team: str) -> int:
        woken.append(team)
        return 0

    ledger.waker = wake
    client.collection("teams").document("t1").set(TeamLedger(team="t1", updated_at="before").to_document())
    store.create_if_absent(new_run("run-k13", {"task": "t"}, now=T0))
    waiting = Waiting(reason=TEAM_CAP, retry_at="2026-11-27T05:01:00Z", since="2026-11-27T05:00:00Z")

    def step(run: RunRecord | None, team: TeamLedger | None) -> tuple[RunRecord | None, None, str]:
        assert run is not None and team is not None
        # a settle lands between the read and the wait: the ledger changes under the waiting claim
        client.collection("teams").document("t1").update({"updated_at": "settled"})
        moved = replace(run, state=RunState.WAITING, submission=replace(run.submission, waiting=waiting))
        return moved, None, "waits"

    said = ledger.apply("run-k13", "t1", step)
    assert said == "waits" and ledger_client.transactions == 0
    assert _stored(client, "run-k13")["state"] == "WAITING" and ledger.waits_on_read == 1
    assert client.collection("teams").document("t1").get().to_dict()["updated_at"] == "settled", "not written"
    assert woken == ["t1"], "the ledger changed since it was read: the team's waiting runs are woken"
    store.merge("run-k13", lambda r: replace(r, metrics={"n": 1}), now=T0)  # remembered: one Commit again
    assert _stored(client, "run-k13")["metrics"] == {"n": 1}
