"""The submission rate limiter's one rule, pure: the Firestore adapter (functions/gcp/rate_limits_store.py)
applies it with two atomic field transforms, the fake under a lock.

Slots, not tokens: every call takes the bucket's next free slot, at or after now, and moves it on by 60 / per_minute
seconds (a virtual-time scheduler, the generic cell rate algorithm without burst). The bucket holds one number,
`next_slot_us`; a take is `next = max(next, now)` then `next += interval`, and the slot is the value before the
increment. Two concurrent takes may interleave those two steps in any order and still get slots at least one interval
apart, each at or after its own now: the maximum only raises `next`, and each increment adds one whole interval.
So no transaction is needed (a burst of deliveries collided on one in the Firestore emulator until each gave up).

A slot in the future is a reservation: the run is queued until then and makes its call without asking again, so a
burst of N runs costs N takes, not one per retry, and their calls come at most per_minute in any 60 seconds.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def interval_us(per_minute: int) -> int:
    """Microseconds between two slots (rounded up: never more than per_minute a minute)."""
    if per_minute < 1:
        raise ValueError(f"per_minute must be at least 1, found {per_minute}")
    return -(-60_000_000 // per_minute)


def to_us(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(microseconds=1)


def from_us(value: int) -> datetime:
    return EPOCH + timedelta(microseconds=value)


def raised(next_slot_us: int | None, now: datetime) -> int:
    """The first step of a take: the bucket's next slot, not before now."""
    return max(next_slot_us or 0, to_us(now))


def slot_of(after_increment_us: int, per_minute: int) -> datetime:
    """The second step's answer (the value after adding one interval) as the slot this take got."""
    return from_us(after_increment_us - interval_us(per_minute))
