"""The submission rate limiter's one rule (issue 26), pure: the Firestore adapter (functions/gcp/rate_limits_store.py)
applies it inside a transaction, the fakes under a lock.

Slots, not tokens: every call takes the bucket's next free slot, at or after now, and moves it on by 60 / per_minute
seconds (a virtual-time scheduler, the generic cell rate algorithm without burst). A slot in the future is a
reservation: the run is queued until then and makes its call without asking again, so a burst of N runs costs N
bucket writes, not one per retry, and their calls come at most per_minute in any 60 seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from schemas.rate_bucket import RateBucket
from schemas.times import format_timestamp, parse_timestamp

BucketStep = Callable[[RateBucket | None], tuple[RateBucket, datetime]]
"""Given the stored bucket (None: none yet), the bucket to store and the slot this call got."""


def interval(per_minute: int) -> timedelta:
    return timedelta(seconds=60 / per_minute)


def take_slot(call: str, region: str, *, per_minute: int, now: datetime) -> BucketStep:
    """The step that reserves the next slot for one call: now when the bucket is idle, else its next free slot."""
    if per_minute < 1:
        raise ValueError(f"per_minute must be at least 1, found {per_minute}")

    def step(cur: RateBucket | None) -> tuple[RateBucket, datetime]:
        free = now if cur is None else max(now, parse_timestamp(cur.next_slot, field="rate_bucket.next_slot"))
        after = format_timestamp(free + interval(per_minute))
        return RateBucket(call=call, region=region, per_minute=per_minute, next_slot=after), free

    return step
