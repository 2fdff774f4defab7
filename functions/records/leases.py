"""The one lease rule behind Landfall's two outboxes: a run's submission claim (runs/{id}.submission) and a dataset
version's claim (dataset_versions/{id}). Pure: the Firestore adapters apply it inside transactions, the fakes under
a lock.

A delivery that takes work records a lease: who holds it and until when. Until then the work is that owner's and
every other delivery is BUSY (it retries later); once the time has passed the lease has lapsed (its holder died or
gave it back early) and the next delivery may take it over.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Generic, TypeVar

from schemas.times import format_timestamp, parse_timestamp

D = TypeVar("D")


class ClaimOutcome(StrEnum):
    CLAIMED = "claimed"
    """This delivery holds the lease now and does the work (a dataset version also after an earlier claim
    lapsed: evaluating it again is safe)."""
    RECOVER = "recover"
    """Runs: a previous owner's lease ran out mid-submission; look for its job before submitting again."""
    BUSY = "busy"
    """Another delivery holds a live lease: retry later."""
    DONE = "done"
    """The work is finished already (submitted, ended, published, refused): a duplicate delivery."""
    NOT_READY = "not-ready"
    """Runs: not planned yet, nothing to claim."""


@dataclass(frozen=True)
class Lease:
    """Who holds a piece of work, and until when."""

    owner: str
    """A fresh id per delivery (uuid4 hex)."""
    until: str
    """RFC 3339 time the lease ends (schemas.times format)."""

    @classmethod
    def granted(cls, owner: str, *, now: datetime, seconds: int) -> Lease:
        return cls(owner, format_timestamp(now + timedelta(seconds=seconds)))

    def released(self, now: datetime) -> Lease:
        """The same lease ended at `now`: the next delivery may take the work over at once."""
        return Lease(self.owner, format_timestamp(now))

    def live(self, now: datetime) -> bool:
        return parse_timestamp(self.until, field="lease until") > now

    def held_by_other(self, owner: str, now: datetime) -> bool:
        """Whether someone other than `owner` holds this lease at `now` (the one reason to answer BUSY)."""
        return self.owner != owner and self.live(now)


def held_by_other(lease: Lease | None, owner: str, now: datetime) -> bool:
    """The rule for a record that may hold no lease at all."""
    return lease is not None and lease.held_by_other(owner, now)


@dataclass(frozen=True)
class Claim(Generic[D]):
    """What a claim attempt decided, and the record as it is after it (unchanged unless CLAIMED or RECOVER)."""

    outcome: ClaimOutcome
    doc: D


__all__ = ["Claim", "ClaimOutcome", "Lease", "held_by_other"]
