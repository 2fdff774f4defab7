"""What one delivery of a TrainingRequest came to: a kind and a detail (the run's state, a rejection's code, a
queueing reason). The handler returns its text, `kind` or `kind:detail`, for logs, tests and the reconciler's
counts."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Said(StrEnum):
    SUBMITTED = "submitted"
    """The run's job was created and recorded (detail: what became of a cancel recorded meanwhile)."""
    RECOVERED = "recovered"
    """A job an earlier delivery created was found and recorded (detail: how recording it went, when not plainly)."""
    DUPLICATE = "duplicate"
    """The run was already past submission (detail: its state)."""
    REJECTED = "rejected"
    """The request was refused before planning or by the plan (detail: the failure reason)."""
    DROPPED = "dropped"
    """A message too unreadable to name a run, acknowledged without one."""
    FAILED = "failed"
    """The run FAILED (detail: why)."""
    WAITING = "waiting"
    """The run WAITS (detail: for what)."""
    QUEUED = "queued"
    """The run's submission is held back for a rate limit (detail: the queue reason)."""
    CANCELLED = "cancelled"
    """A cancel recorded before the job was created ended the run."""
    LOST_CLAIM = "lost-claim"
    """Another delivery took the submission over: this one left the run to it."""
    ADOPTED = "adopted"
    """Recording the job: the run already records it (another delivery adopted it)."""
    SUPERSEDED = "superseded"
    """Recording the job: another delivery took the claim over; the job was recorded as superseded and cancelled."""
    KNOWN = "known"
    """Recording the job: the run records it as ended or superseded already; a new job is submitted instead."""
    GONE = "gone"
    """Recording the job: the run's document is gone."""
    UNCHANGED = "unchanged"
    """Recording the job: the run could not move to SUBMITTED from its state (detail: that state)."""
    CANCEL_AT_ONCE = "submitted-cancel"
    """Recording the job: a cancel was recorded while the job was being created (it is cancelled at once)."""


@dataclass(frozen=True)
class Outcome:
    kind: Said
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.detail}" if self.detail else self.kind.value


__all__ = ["Outcome", "Said"]
