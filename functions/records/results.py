"""RunFinished, once per run (schemas/run_finished.py): announce a run that has ended on the run-results topic, then
mark `submission.results_published` in a transaction.

A run moving to a terminal state gets the flag False (run_rules.transitioned), so the reconciler can ask Firestore
for runs still to announce (`results_published == False`) and announce them again when the publisher died between
the transition and the publish. The flag is set after the publish: a crash in between publishes again (at least
once, like Pub/Sub itself; consumers deduplicate on run_id), never zero times. A second delivery that finds the flag
set publishes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from functions.records.run_rules import RunsRules, Step
from schemas.run_finished import RunFinished, run_finished
from schemas.run_record import RunRecord

Publish = Callable[[RunFinished], str]
"""Publishes one RunFinished and returns its message id; raises TransientError when Pub/Sub did not take it."""


def marked_published() -> Step[bool]:
    """Set the flag on a terminal run; result: whether this call set it (False: already set or not ended)."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, bool]:
        if cur is None or not cur.state.terminal or cur.submission.results_published:
            return None, False
        return replace(cur, submission=replace(cur.submission, results_published=True)), True

    return step


def announce(run_id: str, store: RunsRules, publish: Publish) -> str:
    """Publish RunFinished for the run if it has ended and was not announced; says what happened."""
    run = store.apply(run_id, lambda cur: (None, cur))
    if run is None or not run.state.terminal:
        return "open"
    if run.submission.results_published:
        return "already-announced"
    message_id = publish(run_finished(run))
    store.apply(run_id, marked_published())
    return f"announced:{message_id}"


__all__ = ["Publish", "announce", "marked_published"]
