"""Pure rules for changing a run record: forward-only states, history, and the submission claim.

Each store operation is a `Step`: given the stored record (None when absent) it returns the record to write (None:
write nothing) and the operation's result. `RunsRules` is the store interface built on them: the Firestore adapter
(functions/gcp/runs_store.py) supplies `apply` through its unit of work (one conditional Commit or a transaction,
functions/gcp/unit_of_work.py), the fake (tests/fakes/runs.py) as a lock; tests exercise the rules without either.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from functions.errors import TransientError
from functions.records.bounds import bounded_history
from functions.records.leases import Claim, ClaimOutcome, Lease, held_by_other
from schemas.run_record import RunRecord, RunState, StateChange, Submission, SubmissionAttempt, can_move
from schemas.times import format_timestamp

T = TypeVar("T")
U = TypeVar("U")
Change = Callable[[RunRecord], RunRecord]
"""Field changes to apply to the current record (atomically with the write, so on the record as stored)."""
Step = Callable[[RunRecord | None], tuple[RunRecord | None, T]]


def transitioned(
    run: RunRecord, new_state: RunState, *, now: datetime, detail: str = "", change: Change | None = None
) -> RunRecord | None:
    """The record after moving to new_state, or None when that move is not allowed from its current state.

    Moving to the state it is already in applies `change` without a new history entry (a repeated event). The
    history keeps its first and last entries (functions/records/bounds.py).
    """
    if run.state != new_state and not can_move(run.state, new_state):
        return None
    out = change(run) if change else run
    stamp = format_timestamp(now)
    if run.state != new_state:
        history, omitted = bounded_history((*out.history, StateChange(new_state, stamp, detail)), out.history_omitted)
        out = replace(out, state=new_state, history=history, history_omitted=omitted)
        if new_state.terminal and out.submission.results_published is None:
            # RunFinished is still to be published: the flag is stored as False so that the reconciler can find it.
            out = replace(out, submission=replace(out.submission, results_published=False))
    return replace(out, updated_at=stamp)


def submission_lease(submission: Submission) -> Lease | None:
    """The lease a run's submission record holds (`owner` until `lease_until`), if any."""
    if not submission.lease_until:
        return None
    return Lease(submission.owner or "", submission.lease_until)


def claimed(run: RunRecord, *, owner: str, now: datetime, lease_seconds: int) -> Claim[RunRecord]:
    """Decide whether `owner` may submit the run's job, and the record that holds its lease."""
    lease = Lease.granted(owner, now=now, seconds=lease_seconds)

    def hold(r: RunRecord) -> RunRecord:
        return replace(r, submission=replace(r.submission, owner=lease.owner, lease_until=lease.until))

    if run.state == RunState.PLANNED:
        new = transitioned(run, RunState.SUBMITTING, now=now, detail="claimed for submission", change=hold)
        assert new is not None, "PLANNED -> SUBMITTING is always allowed"
        return Claim(ClaimOutcome.CLAIMED, new)
    if run.state == RunState.SUBMITTING:
        if held_by_other(submission_lease(run.submission), owner, now):
            return Claim(ClaimOutcome.BUSY, run)
        new = transitioned(run, RunState.SUBMITTING, now=now, change=hold)
        assert new is not None, "staying in a state is always allowed"
        return Claim(ClaimOutcome.RECOVER, new)
    if run.state == RunState.RECEIVED:
        return Claim(ClaimOutcome.NOT_READY, run)
    return Claim(ClaimOutcome.DONE, run)


# Store operations, as steps ------------------------------------------------------------------------------------


def create_if_absent(run: RunRecord) -> Step[tuple[RunRecord, bool]]:
    """Store `run` unless its id exists; result: (the stored record, whether this call created it)."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, tuple[RunRecord, bool]]:
        return (run, (run, True)) if cur is None else (None, (cur, False))

    return step


def transition(
    state: RunState, *, now: datetime, detail: str = "", change: Change | None = None
) -> Step[tuple[RunRecord | None, bool]]:
    """Move the run forward; result: (record after, whether it changed). A disallowed move writes nothing."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, tuple[RunRecord | None, bool]]:
        if cur is None:
            return None, (None, False)
        new = transitioned(cur, state, now=now, detail=detail, change=change)
        return (new, (new, True)) if new is not None else (None, (cur, False))

    return step


def merge(*, now: datetime, change: Change) -> Step[RunRecord | None]:
    """Apply `change` without changing state (e.g. record a submission attempt); result: the record after."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, RunRecord | None]:
        if cur is None:
            return None, None
        new = transitioned(cur, cur.state, now=now, change=change)
        return new, new

    return step


FirstAttempt = Callable[[RunRecord], SubmissionAttempt | None]
"""The CreateCustomJob attempt a fresh claim is about to make (None: no plan to try), recorded with the claim."""


def claim_submission(
    run_id: str, *, owner: str, now: datetime, lease_seconds: int, first_attempt: FirstAttempt | None = None
) -> Step[Claim[RunRecord]]:
    """Claim the run's submission for `owner` (see `claimed`); the lease is written only when taken. With
    first_attempt, a fresh claim (CLAIMED) also records that attempt, pending, in the same write: it is on record
    before it is made, as every attempt must be, without a write of its own."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, Claim[RunRecord]]:
        if cur is None:
            raise TransientError(f"run {run_id} does not exist yet")
        claim = claimed(cur, owner=owner, now=now, lease_seconds=lease_seconds)
        if claim.outcome == ClaimOutcome.CLAIMED and first_attempt is not None:
            attempt = first_attempt(claim.doc)
            if attempt is not None:
                attempts = (*(claim.doc.submission.attempts or ()), attempt)
                claim = Claim(
                    claim.outcome, replace(claim.doc, submission=replace(claim.doc.submission, attempts=attempts))
                )
        taken = claim.outcome in (ClaimOutcome.CLAIMED, ClaimOutcome.RECOVER)
        return (claim.doc if taken else None), claim

    return step


def then(first: Step[T], second: Step[U]) -> Step[tuple[T, U]]:
    """Two steps as one write: second sees the record first would write (the stored one when first writes
    nothing), and what is written is second's record, else first's. Applied by the store, both are one transaction."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, tuple[T, U]]:
        new, a = first(cur)
        newer, b = second(cur if new is None else new)
        return (new if newer is None else newer), (a, b)

    return step


class RunsRules(ABC):
    """A runs store: each operation is one rule step applied atomically to one run by `apply`."""

    @abstractmethod
    def apply(self, run_id: str, step: Step[T]) -> T:
        """Read run_id's record (None when absent), run step on it, write what it returns, all atomically."""

    @abstractmethod
    def get(self, run_id: str) -> RunRecord | None:
        """The stored run (None when absent)."""

    def create_if_absent(self, run: RunRecord) -> tuple[RunRecord, bool]:
        """Store run unless a run with its id exists; returns (the stored record, whether this call created it)."""
        return self.apply(run.run_id, create_if_absent(run))

    def transition(
        self, run_id: str, state: RunState, *, now: datetime, detail: str = "", change: Change | None = None
    ) -> tuple[RunRecord | None, bool]:
        """Move the run forward; returns (record after, whether it changed). A disallowed move changes nothing."""
        return self.apply(run_id, transition(state, now=now, detail=detail, change=change))

    def merge(self, run_id: str, change: Change, *, now: datetime) -> RunRecord | None:
        """Apply change without changing state (e.g. record a submission attempt)."""
        return self.apply(run_id, merge(now=now, change=change))

    def claim_submission(
        self,
        run_id: str,
        *,
        owner: str,
        now: datetime,
        lease_seconds: int,
        first_attempt: FirstAttempt | None = None,
        before: Step[Any] | None = None,
    ) -> Claim[RunRecord]:
        """Claim the run's submission (see claim_submission); with `before`, that step (e.g. the move to PLANNED)
        first, in the same write."""
        claim = claim_submission(run_id, owner=owner, now=now, lease_seconds=lease_seconds, first_attempt=first_attempt)
        return self.apply(run_id, claim if before is None else after(before, claim))


__all__ = [
    "Change",
    "FirstAttempt",
    "RunsRules",
    "Step",
    "claim_submission",
    "claimed",
    "create_if_absent",
    "merge",
    "submission_lease",
    "then",
    "transition",
    "transitioned",
]


def after(first: Step[Any], second: Step[U]) -> Step[U]:
    """`then(first, second)` answering second's result alone (first's is not needed: the move to PLANNED before a
    claim)."""
    both = then(first, second)

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, U]:
        new, (_, result) = both(cur)
        return new, result

    return step
