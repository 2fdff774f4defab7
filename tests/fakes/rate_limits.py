"""In-memory stand-in for functions/gcp/rate_limits_store.RateLimitsStore: the same pure rule under a lock, and the
slots it handed out (for tests to check the spacing)."""

from __future__ import annotations

import threading
from datetime import datetime

from functions.records.rate_limits import take_slot
from schemas.rate_bucket import CREATE_CUSTOM_JOB, RateBucket


class FakeRateLimits:
    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self.buckets: dict[str, RateBucket] = {}
        self.slots: list[tuple[str, datetime]] = []
        self._lock = threading.Lock()

    def take(self, region: str, now: datetime) -> datetime:
        with self._lock:
            bucket, slot = take_slot(CREATE_CUSTOM_JOB, region, per_minute=self.per_minute, now=now)(
                self.buckets.get(region)
            )
            self.buckets[region] = bucket
            self.slots.append((region, slot))
            return slot
