"""UploadModel behind the dispatcher's per-region submission limiter (functions/records/model_registration.py, step 3):
Google counts it in the "Job or LRO submission requests" quota beside CreateCustomJob (docs/deploy.md, "Vertex AI
rate limits"). A near slot is waited for; a far one is kept on the run and used, without taking another, by the
registration after it; nothing is uploaded twice or dropped."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from functions.errors import TransientError
from functions.records.model_registration import QUEUED, register_model
from schemas.model_version import VersionView
from schemas.run_record import RunRecord
from schemas.times import format_timestamp
from tests.fakes.models import FakePromotions, FakeRegistry
from tests.fakes.rate_limits import FakeRateLimits
from tests.fakes.runs import FakeRuns
from tests.fakes.world import NOW
from tests.unit.test_model_registration import succeeded, target

REGION = "europe-west1"


class Clock:
    """The registration's clock and sleep: a sleep moves the clock on, and is recorded."""

    def __init__(self) -> None:
        self.at = NOW
        self.slept: list[float] = []

    def now(self) -> datetime:
        return self.at

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.at += timedelta(seconds=seconds)


def stored(runs: FakeRuns, run_id: str) -> RunRecord:
    run = runs.get(run_id)
    assert run is not None
    return run


def register(runs: FakeRuns, registry: FakeRegistry, limiter: FakeRateLimits, clock: Clock, run_id: str) -> str:
    return register_model(
        run_id,
        runs,
        registry,
        target,
        now=clock.now,
        promotions=FakePromotions(),
        holds_model=lambda folder: True,
        limiter=limiter,
        region=REGION,
        sleep=clock.sleep,
    )


def test_an_upload_takes_a_slot_in_the_registrys_region_and_waits_for_a_near_one() -> None:
    runs, registry, limiter, clock = FakeRuns(), FakeRegistry(), FakeRateLimits(per_minute=12), Clock()
    runs.put(succeeded("run-1", 0.9))
    runs.put(succeeded("run-2", 0.8))
    assert register(runs, registry, limiter, clock, "run-1").startswith("registered:")
    assert limiter.slots == [(REGION, NOW)] and clock.slept == []
    # the next slot is 5 s on (12 a minute): waited for before the upload
    assert register(runs, registry, limiter, clock, "run-2").startswith("registered:")
    assert limiter.slots[1] == (REGION, NOW + timedelta(seconds=5))
    assert clock.slept == [5.0]
    assert registry.uploads == {"run-1": 1, "run-2": 1}


def test_a_far_slot_is_kept_on_the_run_and_the_registration_after_it_uploads_without_taking_another() -> None:
    runs, registry, limiter, clock = FakeRuns(), FakeRegistry(), FakeRateLimits(per_minute=4), Clock()
    limiter.take(REGION, NOW)  # a submission took the slot at NOW: the next is 15 s on, past SLOT_WAIT
    runs.put(succeeded("run-1", 0.9))
    assert register(runs, registry, limiter, clock, "run-1") == QUEUED
    slot = format_timestamp(NOW + timedelta(seconds=15))
    held = stored(runs, "run-1").submission
    assert (held.model_slot_at, held.model_lease_until) == (slot, slot)
    assert registry.uploads == {} and stored(runs, "run-1").model is None and clock.slept == []

    # a delivery or reconcile pass before the slot leaves it alone (the lease holds until the slot)
    clock.at = NOW + timedelta(seconds=10)
    assert register(runs, registry, limiter, clock, "run-1") == "registering-elsewhere"
    # after it: the upload uses the slot it holds
    clock.at = NOW + timedelta(seconds=16)
    assert register(runs, registry, limiter, clock, "run-1").startswith("registered:")
    assert len(limiter.slots) == 2, "no second slot was taken"
    after = stored(runs, "run-1")
    assert after.model is not None and after.submission.model_slot_at is None
    assert after.submission.model_lease_until is None
    assert registry.uploads == {"run-1": 1}


def test_a_failed_upload_gives_its_used_slot_and_the_lease_back() -> None:
    runs, limiter, clock = FakeRuns(), FakeRateLimits(per_minute=4), Clock()
    limiter.take(REGION, NOW)
    runs.put(succeeded("run-1", 0.9))
    assert register(runs, FakeRegistry(), limiter, clock, "run-1") == QUEUED

    class Refusing(FakeRegistry):
        def upload(self, model_id: str, model: dict[str, Any]) -> VersionView:
            raise TransientError("UploadModel: RESOURCE_EXHAUSTED")

    clock.at = NOW + timedelta(seconds=16)
    with pytest.raises(TransientError):
        register(runs, Refusing(), limiter, clock, "run-1")
    released = stored(runs, "run-1").submission
    assert released.model_slot_at is None, "the slot was used by the refused call: the next try takes a new one"
    assert released.model_lease_until == format_timestamp(clock.at)


def test_a_version_found_by_its_label_is_adopted_without_taking_a_slot() -> None:
    runs, registry, limiter, clock = FakeRuns(), FakeRegistry(), FakeRateLimits(per_minute=4), Clock()
    runs.put(succeeded("run-1", 0.9))
    said = register_model(
        "run-1", runs, registry, target, now=clock.now, promotions=FakePromotions(), holds_model=lambda folder: True
    )
    assert said.startswith("registered:")
    runs.put(succeeded("run-1", 0.9))  # the record lost: the version is found by its label
    assert register(runs, registry, limiter, clock, "run-1").startswith("adopted:")
    assert limiter.slots == []
