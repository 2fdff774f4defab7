"""RunFinished, once per run (schemas/run_finished.py): claim the announcement under a lease, publish it on the
run-results topic, then mark `submission.results_published` in a transaction.

A run moving to a terminal state gets the flag False (run_rules.transitioned), so the reconciler can ask Firestore
for runs still to announce (`results_published == False`) and announce them again when the publisher died between
the transition and the publish. Deliveries that see the run end at once (the listener's duplicated job events, a
reconcile pass beside them) race for the lease (`submission.results_lease_until`, one transaction): one publishes,
the others say so and publish nothing. The flag is set after the publish, so only a crash between the two publishes
again, once its lease has lapsed (at least once, like Pub/Sub itself; consumers deduplicate on run_id), never zero
times. A failed publish gives the lease back at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta

from functions.records.run_rules import RunsRules, Step
from schemas.run_finished import RunFinished, run_finished
from schemas.run_record import RunRecord
from schemas.times import format_timestamp, parse_timestamp

ANNOUNCE_LEASE = timedelta(seconds=60)
"""How long a delivery holds the right to publish a run's RunFinished before another may take it over."""

Publish = Callable[[RunFinished], str]
"""Publishes one RunFinished and returns its message id; raises TransientError when Pub/Sub did not take it."""


def marked_published() -> Step[bool]:
    """Set the flag on a terminal run; result: whether this call set it (False: already set or not ended)."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, bool]:
        if cur is None or not cur.state.terminal or cur.submission.results_published:
            return None, False
        return replace(cur, submission=replace(cur.submission, results_published=True)), True

    return step


def claimed_announcement(*, now: datetime) -> Step[tuple[str, RunRecord | None]]:
    """Take the announcement lease of an ended, unannounced run; result: ("claimed", the run) or why not."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, tuple[str, RunRecord | None]]:
        if cur is None or not cur.state.terminal:
            return None, ("open", None)
        if cur.submission.results_published:
            return None, ("already-announced", None)
        until = cur.submission.results_lease_until
        if until is not None and parse_timestamp(until, field="submission.results_lease_until") > now:
            return None, ("announcing-elsewhere", None)
        claimed = replace(
            cur, submission=replace(cur.submission, results_lease_until=format_timestamp(now + ANNOUNCE_LEASE))
        )
        return claimed, ("claimed", claimed)

    return step


def released_announcement(*, now: datetime) -> Step[None]:
    """Give the lease back (the publish failed): the next delivery or reconcile pass may announce at once."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, None]:
        if cur is None or cur.submission.results_published:
            return None, None
        return replace(cur, submission=replace(cur.submission, results_lease_until=format_timestamp(now))), None

    return step


def announce(run_id: str, store: RunsRules, publish: Publish, *, now: Callable[[], datetime]) -> str:
    """Publish RunFinished for the run if it has ended and was not announced; says what happened."""
    outcome, run = store.apply(run_id, claimed_announcement(now=now()))
    if run is None:
        return outcome
    try:
        message_id = publish(run_finished(run))
    except BaseException:
        store.apply(run_id, released_announcement(now=now()))
        raise
    store.apply(run_id, marked_published())
    return f"announced:{message_id}"


__all__ = ["ANNOUNCE_LEASE", "Publish", "announce", "claimed_announcement", "marked_published", "released_announcement"]
