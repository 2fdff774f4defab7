"""In-memory stand-in for functions/gcp/rate_limits_store.RateLimitsStore: the same two steps under a lock, and the
slots it handed out (for tests to check the spacing)."""

from __future__ import annotations

import threading
from datetime import datetime

from functions.records.rate_limits import interval_us, raised, slot_of


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

    def taken_with_claim(self, run_id: str) -> tuple[str, datetime] | None:
        """As the store: the fakes write a claim under a lock, never in a Commit a slot could ride in."""
        return None
