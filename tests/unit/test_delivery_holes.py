"""Holes our own fault campaign found in the dispatcher's exactly-once path, against
the fakes: a run left RECEIVED by a delivery that died is taken over by the reconciler; a cancel recorded while the
run is SUBMITTING stops the delivery before CreateCustomJob, and a job created anyway is cancelled at once; a
delivery that fails before CreateCustomJob gives its submission claim back. Each keeps one job per attempt."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from functions.errors import TransientError
from functions.gcp.vertex import JobView
from functions.reconciler.cancel import cancel_run
from functions.reconciler.handler import ReconcilerDeps, _reconcile
from schemas.run_record import RunRecord, RunState, new_run
from schemas.times import format_timestamp
from tests.fakes.world import NOW, PLAN, REQUEST, RUN_ID, SETTINGS, World

LEASE = timedelta(seconds=SETTINGS.submission_lease_seconds)


def states(run: RunRecord) -> list[str]:
    return [h.state for h in run.history]


def reconciler(w: World) -> ReconcilerDeps:
    return replace(w.reconciler_deps(), lease_seconds=int(LEASE.total_seconds()))


# Item 11: a run left RECEIVED ----------------------------------------------------------------------------------


def test_a_run_left_received_by_a_dispatcher_failing_after_recording_it_is_taken_over_once() -> None:
    """Every delivery records the run and then fails (here: in planning) until the message is dead-lettered; the
    dispatcher is healthy again, but nothing redelivers. The reconciler plans and submits it, once."""
    w = World()
    healthy = w.dispatch_deps

    def broken(request: object) -> object:
        raise RuntimeError("the dispatcher fails after recording the run")

    w.dispatch_deps = replace(healthy, plan=broken)  # type: ignore[arg-type]
    for attempt in range(15):
        with pytest.raises(RuntimeError):
            w.deliver(message_id=f"m-{attempt}")
    assert w.run().state == RunState.RECEIVED and w.vertex.create_calls == []
    w.dispatch_deps = healthy
    deps = reconciler(w)
    w.clock.now = NOW + LEASE - timedelta(seconds=1)
    assert _reconcile(deps) == "unchanged=1", "within a lease the run is still its delivery's"
    w.clock.now = NOW + LEASE + timedelta(seconds=1)
    assert _reconcile(deps) == "resubmitted=1"
    run = w.run()
    assert states(run) == ["RECEIVED", "PLANNED", "SUBMITTING", "SUBMITTED"] and run.plan == PLAN
    assert len(w.vertex.jobs) == 1 and w.vertex.create_calls == ["us-central1"]
    assert _reconcile(deps) == "unchanged=1" and len(w.vertex.jobs) == 1
    assert w.deliver(message_id="m-late") == "duplicate:SUBMITTED", "a late redelivery changes nothing"


def test_a_received_run_taken_over_while_its_delivery_is_back_submits_one_job() -> None:
    """The reconciler and a redelivery take the run at once: the claim lets one submit, the other is BUSY."""
    w = World()
    w.runs.put(new_run(RUN_ID, REQUEST.to_dict(), now=NOW))
    w.clock.now = NOW + LEASE + timedelta(seconds=1)
    create = w.vertex.create
    said: list[str] = []

    def create_while_a_redelivery_arrives(region: str, custom_job: dict[str, Any]) -> JobView:
        with pytest.raises(TransientError, match="another delivery is submitting it"):
            w.deliver(message_id="m-2")
        said.append("busy")
        return create(region, custom_job)

    w.vertex.create = create_while_a_redelivery_arrives  # type: ignore[method-assign]
    assert _reconcile(reconciler(w)) == "resubmitted=1"
    assert said == ["busy"] and len(w.vertex.jobs) == 1 and w.run().state == RunState.SUBMITTED


def test_a_received_run_whose_request_breaks_the_rules_is_rejected_by_the_takeover() -> None:
    w = World()
    bad = replace(REQUEST, dataset=replace(REQUEST.dataset, uri=REQUEST.dataset.uri.rstrip("/")))
    w.runs.put(new_run(RUN_ID, bad.to_dict(), now=NOW))
    w.clock.now = NOW + LEASE + timedelta(seconds=1)
    assert _reconcile(reconciler(w)) == "resubmitted=1"
    run = w.run()
    assert run.state == RunState.REJECTED and run.error is not None and "must name a prefix" in run.error.message
    assert w.vertex.create_calls == []


def test_a_planned_run_whose_delivery_died_is_taken_over_too() -> None:
    w = World()
    w.runs.put(
        replace(new_run(RUN_ID, REQUEST.to_dict(), now=NOW), state=RunState.PLANNED, plan=PLAN)  # claim never made
    )
    w.clock.now = NOW + LEASE + timedelta(seconds=1)
    assert _reconcile(reconciler(w)) == "resubmitted=1"
    assert w.run().state == RunState.SUBMITTED and len(w.vertex.jobs) == 1


# Item 12: a cancel during SUBMITTING ---------------------------------------------------------------------------


def test_a_cancel_recorded_while_submitting_stops_the_next_delivery_before_it_creates() -> None:
    """The first delivery failed at CreateCustomJob (UNAVAILABLE) and gave the claim back; `landfall cancel` came
    then; the redelivery must not create the job."""
    w = World()
    w.vertex.refuse("us-central1", gexc.ServiceUnavailable("try again"))
    with pytest.raises(TransientError):
        w.deliver()
    said = cancel_run(RUN_ID, by="ada", store=w.runs, vertex=w.vertex, now=NOW)  # type: ignore[arg-type]
    assert "is being submitted" in said and w.run().state == RunState.SUBMITTING
    assert w.deliver(message_id="m-2") == "cancelled:before-create"
    run = w.run()
    assert run.state == RunState.CANCELLED and w.vertex.jobs == {}
    assert w.vertex.create_calls == ["us-central1"], "only the refused call"
    assert run.error is not None and run.error.reason == "cancelled" and "by ada" in run.error.message
    assert run.submission.results_published is False, "its RunFinished is still to announce"
    assert w.deliver(message_id="m-3") == "duplicate:CANCELLED"


def test_a_cancel_recorded_while_the_job_was_being_created_cancels_it_at_once() -> None:
    w = World()
    create = w.vertex.create

    def create_while_cancelled(region: str, custom_job: dict[str, Any]) -> JobView:
        cancel_run(RUN_ID, by="ada", store=w.runs, vertex=w.vertex, now=NOW)  # type: ignore[arg-type]
        return create(region, custom_job)

    w.vertex.create = create_while_cancelled  # type: ignore[method-assign]
    assert w.deliver() == "submitted:cancel-requested"
    (name,) = w.vertex.jobs
    assert w.vertex.get(name).state == "JOB_STATE_CANCELLED", "cancelled by the delivery, not a reconcile pass"
    run = w.run()
    assert run.state == RunState.SUBMITTED and run.vertex is not None and run.vertex.job_name == name
    assert w.job_event(name.rsplit("/", 1)[-1]) == "recorded:CANCELLED"
    run = w.run()
    assert run.state == RunState.CANCELLED and run.error is not None and "cancelled by ada" in run.error.message


def test_a_cancel_recorded_between_two_plans_stops_before_the_next_create() -> None:
    w = World()
    create = w.vertex.create

    def refused_then_cancelled(region: str, custom_job: dict[str, Any]) -> JobView:
        cancel_run(RUN_ID, by="ada", store=w.runs, vertex=w.vertex, now=NOW)  # type: ignore[arg-type]
        w.vertex.refuse(region, gexc.ResourceExhausted("no quota"))
        return create(region, custom_job)

    w.vertex.create = refused_then_cancelled  # type: ignore[method-assign]
    assert w.deliver() == "cancelled:before-create"
    run = w.run()
    assert run.state == RunState.CANCELLED and w.vertex.jobs == {} and w.vertex.create_calls == ["us-central1"]
    assert [a.outcome[:9] for a in run.submission.attempts or ()] == ["capacity:"]


def test_a_recovering_delivery_adopts_the_earlier_job_and_cancels_it_when_a_cancel_is_recorded() -> None:
    w = World()
    w.vertex.crash_on_create("us-central1", after_creating=True)
    with pytest.raises(BaseException, match="process died"):
        w.deliver()
    (name,) = w.vertex.jobs
    cancel_run(RUN_ID, by="ada", store=w.runs, vertex=w.vertex, now=NOW)  # type: ignore[arg-type]
    w.clock.now = NOW + LEASE + timedelta(seconds=1)
    assert w.deliver(message_id="m-2") == "recovered:submitted:cancel-requested"
    assert w.vertex.get(name).state == "JOB_STATE_CANCELLED" and len(w.vertex.jobs) == 1


# Item 14: the claim given back ---------------------------------------------------------------------------------


def test_a_delivery_failing_before_create_gives_the_claim_back_so_the_redelivery_need_not_wait() -> None:
    """Vertex answers UNAVAILABLE three times: to the first CreateCustomJob, then to the recovering deliveries'
    look for an earlier job. Each delivery created nothing, so none keeps the lease; the fourth submits at once."""
    w = World()
    w.vertex.refuse("us-central1", gexc.ServiceUnavailable("try again"))
    find = w.vertex.find_by_run
    unavailable = [2]

    def flaky_find(region: str, run_id: str, *, canary: bool = False) -> JobView | None:
        if unavailable[0]:
            unavailable[0] -= 1
            raise TransientError("ListCustomJobs: Vertex AI unavailable (ServiceUnavailable); will retry")
        return find(region, run_id, canary=canary)

    w.vertex.find_by_run = flaky_find  # type: ignore[method-assign]
    for attempt in range(3):
        w.clock.now = NOW + timedelta(seconds=10 * attempt)
        with pytest.raises(TransientError, match="unavailable"):
            w.deliver(message_id=f"m-{attempt}")
        run = w.run()
        assert run.state == RunState.SUBMITTING
        assert run.submission.lease_until == format_timestamp(w.clock.now), "the claim is given back"
    w.clock.now = NOW + timedelta(seconds=30)
    assert w.deliver(message_id="m-3") == "submitted", "the redelivery does not wait out the 120 s lease"
    assert len(w.vertex.jobs) == 1 and w.run().state == RunState.SUBMITTED


def test_a_delivery_whose_claim_was_taken_over_gives_nothing_back() -> None:
    """Only this delivery's own lease is ended: one that another delivery holds by now is left as it is."""
    w = World()
    w.vertex.refuse("us-central1", gexc.ServiceUnavailable("try again"))
    with pytest.raises(TransientError):
        w.deliver()
    other_until = format_timestamp(NOW + 2 * LEASE)

    def taken_over_then_unavailable(region: str, run_id: str, *, canary: bool = False) -> JobView | None:
        w.runs.merge(
            RUN_ID,
            lambda r: replace(r, submission=replace(r.submission, owner="other", lease_until=other_until)),
            now=w.clock.now,
        )
        raise TransientError("ListCustomJobs: Vertex AI unavailable; will retry")

    w.vertex.find_by_run = taken_over_then_unavailable  # type: ignore[method-assign]
    with pytest.raises(TransientError):
        w.deliver(message_id="m-2")
    run = w.run()
    assert (run.submission.owner, run.submission.lease_until) == ("other", other_until)


# Item 13: a large message refused with its reason --------------------------------------------------------------


def test_a_nine_megabyte_request_is_rejected_with_its_size_and_kept_within_a_firestore_document() -> None:
    """Pub/Sub takes 10 MB; a TrainingRequest is at most 256 KiB. The REJECTED run keeps the large field cut, so its
    write fits Firestore's 1 MiB document and the message is acknowledged with the reason, not retried."""
    raw = {**REQUEST.to_dict(), "labels": {"note": "x" * (9 * 1024 * 1024)}}
    data = json.dumps(raw).encode()
    w = World()
    assert w.deliver(data, message_id="m-big") == "rejected:invalid-request"
    run = w.run()
    assert run.state == RunState.REJECTED and run.error is not None
    assert f"message is {len(data)} bytes; a TrainingRequest is at most" in run.error.message
    assert run.request["idempotency_key"] == REQUEST.idempotency_key
    kept = run.request["labels"]
    assert isinstance(kept, str) and kept.endswith(f"({len(json.dumps(raw['labels']))} characters)")
    assert len(json.dumps(w.doc(), default=str)) < 64 * 1024
