"""In-memory stand-in for functions/gcp/rate_limits_store.RateLimitsStore: the same two steps under a lock, and the
slots it handed out (for tests to check the spacing)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

from functions.records.rate_limits import SlotChoice, interval_us, raised, slot_of


class FakeRateLimits:
    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self.next_slot_us: dict[str, int] = {}
        self.slots: list[tuple[str, datetime]] = []
        self._lock = threading.Lock()

    def take(self, region: str, now: datetime) -> datetime:
        with self._lock:
            after = raised(self.next_slot_us.get(region), now) + interval_us(self.per_minute)
            self.next_slot_us[region] = after
            slot = slot_of(after, self.per_minute)
            self.slots.append((region, slot))
            return slot

    def rider(self, region_of: Callable[[object], str | None], now: datetime) -> FakeSlotRider:
        return FakeSlotRider(self, region_of, now)


class FakeSlotRider(SlotChoice):
    """The rate limits store's SlotRider for the fakes: tests/fakes/runs.py FakeRuns takes it (`ride`) once it has
    written a step that wanted it, as the runs store's Commit takes the real one with the claim."""

    def __init__(self, limiter: FakeRateLimits, region_of: Callable[[object], str | None], now: datetime) -> None:
        super().__init__(region_of, now)
        self._limiter = limiter

    def ride(self) -> None:
        if self.region is not None:
            self.slot = self._limiter.take(self.region, self._now)
