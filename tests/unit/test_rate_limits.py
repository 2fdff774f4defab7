"""Rate limits are not capacity, in the pure parts: Vertex's rate-limit answers told apart from capacity, the limiter's
slots, the run queued on its plan (never moved to a fallback for a rate limit), and the emulator's rate-limit rules."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta
from itertools import pairwise

import pytest
from google.api_core import exceptions as gexc
from google.rpc import error_details_pb2

from deploy.vertex_emulator.config import ConfigError
from deploy.vertex_emulator.faults import FaultPlan, parse_rules, rate_limit_message
from functions.dispatch import handler
from functions.gcp.vertex import CapacityError, RateLimitedError, quota_metric, translate_error
from functions.records.rate_limits import interval_us, raised, slot_of, to_us
from landfall.commands.runs import describe
from schemas.run_record import RunState, parse_run_record
from schemas.times import parse_timestamp
from schemas.training_request import run_id_for
from schemas.vocabulary import SUBMIT_RATE, VERTEX_RATE_LIMIT
from tests.fakes.rate_limits import FakeRateLimits
from tests.fakes.world import NOW, PLAN, REQUEST, RUN_ID, SETTINGS, World

SUBMISSIONS = "aiplatform.googleapis.com/job_submission_requests"
RATE_MESSAGE = (
    "Quota exceeded for quota metric 'Job or LRO submission requests' and limit 'Job or LRO submission requests per "
    "minute per region' of service 'aiplatform.googleapis.com' for consumer 'projects/landfall-local'."
)
GPU_QUOTA = (
    "The following quota metrics exceed quota limits: aiplatform.googleapis.com/custom_model_training_nvidia_h100_gpus"
)


def rate_limited(message: str = RATE_MESSAGE, *, with_info: bool = True) -> gexc.ResourceExhausted:
    info = error_details_pb2.ErrorInfo(
        reason="RATE_LIMIT_EXCEEDED", domain="googleapis.com", metadata={"quota_metric": SUBMISSIONS}
    )
    return gexc.ResourceExhausted(message, details=[info] if with_info else [], error_info=info if with_info else None)


def test_a_rate_quota_is_not_capacity_and_names_its_metric() -> None:
    error = translate_error(rate_limited(), "CreateCustomJob in us-central1", "us-central1")
    assert isinstance(error, RateLimitedError) and not isinstance(error, CapacityError)
    assert (error.region, error.quota_metric) == ("us-central1", SUBMISSIONS)
    assert SUBMISSIONS in str(error)


def test_the_message_alone_tells_a_per_minute_quota_from_a_gpu_quota() -> None:
    assert isinstance(translate_error(rate_limited(with_info=False), "create"), RateLimitedError)
    gpus = translate_error(gexc.ResourceExhausted(GPU_QUOTA), "create")
    assert isinstance(gpus, CapacityError)
    assert quota_metric(gexc.ResourceExhausted(GPU_QUOTA)).endswith("custom_model_training_nvidia_h100_gpus")
    # a GPU quota stays capacity even should its answer carry reason-less details
    assert isinstance(translate_error(gexc.ResourceExhausted("no quota in us-central1"), "create"), CapacityError)


def test_slots_keep_any_minute_under_the_limit_however_two_takes_interleave() -> None:
    limiter = FakeRateLimits(per_minute=10)
    slots = [limiter.take("us-central1", NOW) for _ in range(25)]
    assert slots[0] == NOW and all(b - a == timedelta(seconds=6) for a, b in pairwise(slots))
    for start in slots:
        assert sum(1 for s in slots if start <= s < start + timedelta(minutes=1)) <= 10
    later = NOW + timedelta(hours=1)
    assert limiter.take("us-central1", later) == later, "an idle bucket gives the present, not a slot in the past"
    # The store's two steps (raise to now, then add an interval) from two takes interleaved in every order: the slots
    # stay an interval apart and none is before its own now.
    step = interval_us(10)
    for order in ("AABB", "ABAB", "ABBA", "BAAB", "BABA", "BBAA"):
        value, nows, got = to_us(NOW), {"A": NOW, "B": NOW + timedelta(seconds=2)}, {}
        done: set[str] = set()
        for who in order:
            if who not in done:
                value = raised(value, nows[who])
                done.add(who)
            else:
                value += step
                got[who] = slot_of(value, 10)
        assert abs(got["A"] - got["B"]) >= timedelta(seconds=6), (order, got)
        assert got["A"] >= nows["A"] and got["B"] >= nows["B"], (order, got)


def test_a_rate_limited_create_queues_the_run_on_its_plan_not_a_fallback() -> None:
    w = World()
    w.vertex.refuse(PLAN.region, rate_limited())
    assert w.deliver() == f"queued:{VERTEX_RATE_LIMIT}"
    run = w.run()
    assert run.state == RunState.SUBMITTING and w.vertex.create_calls == [PLAN.region]
    queued = run.submission.queued
    assert queued is not None and (queued.reason, queued.region, queued.tries) == (VERTEX_RATE_LIMIT, PLAN.region, 1)
    assert SUBMISSIONS in queued.message and queued.over_at is None
    (attempt,) = run.submission.attempts or ()
    assert attempt.region == PLAN.region and attempt.outcome.startswith("rate-limited")
    assert run.submission.lease_until == queued.retry_at and parse_timestamp(queued.retry_at) > NOW
    assert f"queued    {VERTEX_RATE_LIMIT} in {PLAN.region}; next try at {queued.retry_at}" in describe(run)
    assert parse_run_record(json.loads(json.dumps(run.to_dict()))) == run, "the queued note round-trips"
    # a redelivery before retry_at finds the lease held; the reconciler's takeover after it creates on the same plan
    with pytest.raises(handler.TransientError):
        w.deliver(message_id="m-2")
    w.clock.now = parse_timestamp(queued.retry_at) + timedelta(seconds=1)
    assert handler.resubmit(run.run_id, w.dispatch_deps) == "submitted"
    run = w.run()
    assert run.state == RunState.SUBMITTED and run.vertex is not None and run.vertex.region == PLAN.region
    assert w.vertex.create_calls == [PLAN.region, PLAN.region] and len(w.vertex.jobs) == 1
    assert run.submission.queued is not None and run.submission.queued.over_at == run.timings.submitted_at
    assert f"queued    {VERTEX_RATE_LIMIT} in {PLAN.region} from {queued.since} to " in describe(run)


def test_the_limiter_queues_a_burst_with_reserved_slots_and_asks_once_per_run() -> None:
    w = World()
    limiter = FakeRateLimits(per_minute=3)
    slept: list[float] = []
    w.dispatch_deps = replace(w.dispatch_deps, limiter=limiter, sleep=slept.append)
    keys = [f"burst-{i}" for i in range(4)]
    said = [w.deliver(replace(REQUEST, idempotency_key=key).to_json(), key) for key in keys]
    assert said == ["submitted"] + [f"queued:{SUBMIT_RATE}"] * 3
    assert w.vertex.create_calls == [PLAN.region] and slept == []
    runs = [w.run(run_id_for(key)) for key in keys]
    queued = runs[1:]
    assert [q.submission.queued.reason for q in queued if q.submission.queued] == [SUBMIT_RATE] * 3
    assert all(q.submission.queued and q.submission.queued.reserved for q in queued)
    assert all(not q.submission.attempts for q in queued), "a queued run records no attempt it did not make"
    retry = [parse_timestamp(q.submission.queued.retry_at) for q in queued if q.submission.queued]
    assert retry == [NOW + timedelta(seconds=20 * i) for i in (1, 2, 3)]
    for run, at in zip(queued, retry, strict=True):
        w.clock.now = at
        assert handler.resubmit(run.run_id, w.dispatch_deps) == "submitted"
    assert len(limiter.slots) == 4, "a run queued with a slot uses it, without taking another"
    assert w.vertex.create_calls == [PLAN.region] * 4 and len(w.vertex.jobs) == 4


def test_the_emulator_rate_limit_rule_counts_per_region_and_refuses_without_counting() -> None:
    plan = FaultPlan()
    plan.replace({"rate_limits": [{"method": "CreateCustomJob", "limit": 2, "window_seconds": 10}]})
    assert [plan.take_rate("CreateCustomJob", "us-central1", now=t) for t in (0.0, 1.0)] == [None, None]
    refused = plan.take_rate("CreateCustomJob", "us-central1", now=2.0)
    assert refused is not None and refused.limit == 2
    assert plan.take_rate("CreateCustomJob", "europe-west4", now=2.0) is None, "each region counts on its own"
    assert plan.take_rate("ListCustomJobs", "us-central1", now=2.0) is None, "other methods are not limited"
    assert plan.take_rate("CreateCustomJob", "us-central1", now=10.5) is None, "the window slides"
    assert plan.counts()["CreateCustomJob us-central1"] == {"calls": 3, "refused": 1}
    assert "per minute per region" in rate_limit_message(refused, "p")
    with pytest.raises(ConfigError, match="method"):
        parse_rules({"rate_limits": [{"method": "CreateJob", "limit": 1}]})
    with pytest.raises(ConfigError, match="limit"):
        parse_rules({"rate_limits": [{"method": "CreateCustomJob", "limit": 0}]})
    assert parse_rules({}).rate_limits == (), "off by default"


def test_the_limit_is_the_deployment_s_from_the_topology_or_the_environment() -> None:
    from deploy.topology import load_topology
    from functions.settings import SettingsError, settings_from_env

    base = {"GOOGLE_CLOUD_PROJECT": "p"}
    topology = load_topology()
    assert settings_from_env(base).vertex_create_per_minute == topology.vertex_create_per_minute
    assert 0 < topology.vertex_create_per_minute <= 60, "under Google's default 60 a minute per region"
    assert settings_from_env({**base, "LANDFALL_VERTEX_CREATE_PER_MINUTE": "120"}).vertex_create_per_minute == 120
    with pytest.raises(SettingsError, match="LANDFALL_VERTEX_CREATE_PER_MINUTE must be a whole number from 0"):
        settings_from_env({**base, "LANDFALL_VERTEX_CREATE_PER_MINUTE": "lots"})
    assert settings_from_env({**base, "LANDFALL_VERTEX_CREATE_PER_MINUTE": "0"}).vertex_create_per_minute == 0
    assert settings_from_env(base).rate_limits_collection == topology.rate_limits_collection


def test_a_run_rate_limited_again_keeps_one_attempt_and_counts_the_tries() -> None:
    w = World()
    w.vertex.refuse(PLAN.region, rate_limited(), rate_limited())
    assert w.deliver() == f"queued:{VERTEX_RATE_LIMIT}"
    first = w.run().submission.queued
    assert first is not None
    w.clock.now = parse_timestamp(first.retry_at) + timedelta(seconds=1)
    assert handler.resubmit(RUN_ID, w.dispatch_deps) == f"queued:{VERTEX_RATE_LIMIT}"
    run = w.run()
    queued = run.submission.queued
    assert queued is not None and (queued.tries, queued.since) == (2, first.since)
    assert parse_timestamp(queued.retry_at) - w.clock.now >= timedelta(seconds=10), "the back-off grows"
    outcomes = [a.outcome for a in run.submission.attempts or ()]
    assert len(outcomes) == 1 and outcomes[0].startswith("rate-limited"), outcomes
    assert w.vertex.create_calls == [PLAN.region, PLAN.region]
    w.clock.now = parse_timestamp(queued.retry_at) + timedelta(seconds=1)
    assert handler.resubmit(RUN_ID, w.dispatch_deps) == "submitted" and len(w.vertex.jobs) == 1


def test_a_delivery_whose_lease_lapsed_while_it_waited_for_the_limiter_creates_nothing() -> None:
    """Found by the e2e test that kills the dispatcher: a take that outlasted the claim's lease, and another delivery
    took the run over meanwhile; the first must not go on to CreateCustomJob (that made a second job)."""
    w = World()

    class SlowLimiter(FakeRateLimits):
        def take(self, region: str, now: datetime) -> datetime:
            slot = super().take(region, now)
            w.clock.now += timedelta(seconds=SETTINGS.submission_lease_seconds + 1)
            w.runs.claim_submission(RUN_ID, owner="another", now=w.clock.now, lease_seconds=60)
            return slot

    w.dispatch_deps = replace(w.dispatch_deps, limiter=SlowLimiter(per_minute=60))
    assert w.deliver() == "lost-claim"
    assert w.vertex.create_calls == [] and w.run().submission.owner == "another"


def test_the_first_slot_rides_in_the_claims_write_and_is_the_one_used() -> None:
    """The dispatcher's first limiter slot is taken with its claim where the claim is one Commit
    (functions/gcp/unit_of_work.py, tests/integration/test_runs_store_known.py); the fakes write under a lock, and the
    delivery takes it right after: either way one slot, and CreateCustomJob made on it, without a second take."""
    w = World()
    limiter = FakeRateLimits(per_minute=60)
    w.dispatch_deps = replace(w.dispatch_deps, limiter=limiter)
    assert w.deliver() == "submitted"
    assert limiter.slots == [(PLAN.region, NOW)], "one slot, taken with the claim"
    assert w.vertex.create_calls == [PLAN.region]
    # A duplicate delivery of the submitted run claims nothing, so takes nothing.
    assert w.deliver(message_id="again") == "duplicate:SUBMITTED"
    assert len(limiter.slots) == 1


def test_a_claim_that_does_not_go_on_to_create_takes_no_slot_with_it() -> None:
    """A cancel recorded before the claim: the run ends CANCELLED without CreateCustomJob, and no slot rode along."""
    from functions.dispatch.handler import slot_region
    from functions.records.leases import Claim, ClaimOutcome
    from schemas.run_record import CancelRequest, new_run

    run = new_run(RUN_ID, REQUEST.to_dict(), now=NOW)
    planned = replace(run, plan=PLAN, state=RunState.PLANNED)
    assert slot_region(Claim(ClaimOutcome.CLAIMED, planned)) == PLAN.region
    cancelled = replace(planned, submission=replace(planned.submission, cancel=CancelRequest(by="me", at="x")))
    assert slot_region(Claim(ClaimOutcome.CLAIMED, cancelled)) is None
    assert slot_region(Claim(ClaimOutcome.RECOVER, planned)) is None, "a takeover looks for its job first"
    assert slot_region(Claim(ClaimOutcome.BUSY, planned)) is None


def test_the_slot_writes_are_the_librarys_own_with_each_takes_moment() -> None:
    """functions/gcp/rate_limits_store.py builds the take's two Writes with the library once per region and copies
    them per take: each copy is what the library builds for that moment, and an earlier copy is left as it was."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import firestore

    from functions.gcp.rate_limits_store import RateLimitsStore

    store = RateLimitsStore(firestore.Client(project="p", credentials=AnonymousCredentials()), "rate_limits", 50)
    first = store.slot_writes("us-central1", NOW)
    later = NOW + timedelta(seconds=7, microseconds=3)
    second = store.slot_writes("us-central1", later)
    assert first == store.library_writes("us-central1", to_us(NOW))
    assert second == store.library_writes("us-central1", to_us(later))
    assert store.slot_writes("europe-west4", NOW) == store.library_writes("europe-west4", to_us(NOW))
    assert first[0].update_transforms[0].maximum.integer_value == to_us(NOW)
