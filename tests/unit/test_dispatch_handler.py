"""Every branch of the dispatcher (handle_training_request) against the fake runs store and fake Vertex: each test
asserts what the delivery answered and the run record it left."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from functions.dispatch import job_record
from functions.dispatch.job_spec import RUN_LABEL
from functions.errors import PermanentError, TransientError
from functions.gcp.vertex import JobView
from schemas.run_record import RunRecord, RunState, new_run, parse_run_record
from schemas.times import format_timestamp
from schemas.training_request import run_id_for
from tests.fakes.runs import FakeRuns
from tests.fakes.vertex import Crash
from tests.fakes.world import FALLBACK_1, FALLBACK_2, NOW, PLAN, REQUEST, REQUEST_JSON, RUN_ID, SETTINGS, Outcome, World

LEASE = timedelta(seconds=SETTINGS.submission_lease_seconds)


def states(run: RunRecord) -> list[str]:
    return [h.state for h in run.history]


def test_a_new_request_is_planned_submitted_once_and_recorded() -> None:
    w = World()
    assert w.deliver() == "submitted"
    run = w.run()
    assert states(run) == ["RECEIVED", "PLANNED", "SUBMITTING", "SUBMITTED"] and run.state == RunState.SUBMITTED
    assert run.request == REQUEST.to_dict()
    assert run.plan == PLAN and run.submission.fallbacks == (FALLBACK_1, FALLBACK_2)
    assert run.cost.estimated_usd == PLAN.estimated_cost_usd and run.cost.actual_usd is None
    (attempt,) = run.submission.attempts or ()
    assert (attempt.region, attempt.machine_type, attempt.outcome, attempt.plan) == (
        "us-central1",
        PLAN.machine_type,
        "created",
        PLAN,
    )
    (job,) = w.vertex.jobs.values()
    assert run.vertex is not None and (run.vertex.job_name, run.vertex.region) == (job.name, "us-central1")
    assert job.labels[RUN_LABEL] == RUN_ID
    assert run.artifacts is not None and run.artifacts.model_dir == f"gs://landfall-landing/runs/{RUN_ID}/model/"
    assert run.timings.created_at == run.timings.submitted_at == format_timestamp(NOW)
    assert run.submission.lease_until == format_timestamp(NOW), "the lease is given back once submitted"
    assert run.error is None and w.planned == [RUN_ID]


class CountingRuns(FakeRuns):
    """A store that counts its writes (each one transaction in Firestore) and remembers the record at each."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[RunRecord | None] = []

    def apply(self, run_id, step):
        result = super().apply(run_id, step)
        self.writes.append(self.get(run_id))
        return result

    def create_if_absent(self, run):
        result = super().create_if_absent(run)
        self.writes.append(self.get(run.run_id))
        return result


def test_a_new_request_reaches_create_custom_job_after_two_writes_with_its_attempt_on_record() -> None:
    runs = CountingRuns()
    w = World(runs=runs)
    seen: list[tuple[int, RunRecord | None]] = []
    create = w.vertex.create

    def watched_create(region, custom_job):
        seen.append((len(runs.writes), runs.get(RUN_ID)))
        return create(region, custom_job)

    w.vertex.create = watched_create  # type: ignore[method-assign]
    assert w.deliver() == "submitted"
    ((writes, before_create),) = seen
    assert writes == 2, "run created, then PLANNED + claim + first attempt in one transaction"
    assert before_create is not None and before_create.state == RunState.SUBMITTING
    assert states(before_create) == ["RECEIVED", "PLANNED", "SUBMITTING"]
    (attempt,) = before_create.submission.attempts or ()
    assert (attempt.outcome, attempt.region, attempt.plan) == ("pending", "us-central1", PLAN)
    assert len(runs.writes) == 3 and w.run().state == RunState.SUBMITTED


def test_the_stored_document_keeps_its_shape_and_round_trips() -> None:
    w = World()
    w.deliver()
    doc = w.doc()
    assert set(doc) == {
        "schema_version",
        "run_id",
        "state",
        "request",
        "created_at",
        "updated_at",
        "history",
        "plan",
        "vertex",
        "artifacts",
        "metrics",
        "error",
        "timings",
        "cost",
        "submission",
    }
    assert set(doc["submission"]) == {"owner", "lease_until", "fallbacks", "attempts"}
    assert set(doc["submission"]["attempts"][0]) == {"region", "machine_type", "at", "outcome", "plan", "round"}
    assert doc["timings"] == {"created_at": NOW, "submitted_at": NOW}  # Firestore timestamps, not text
    assert doc["created_at"] == doc["history"][0]["at"] == doc["submission"]["attempts"][0]["at"] == NOW
    assert doc["cost"] == {"estimated_usd": PLAN.estimated_cost_usd}
    assert doc["plan"] == PLAN.to_dict() and doc["metrics"] is None and doc["error"] is None
    assert parse_run_record(doc).to_document() == doc
    assert parse_run_record(doc).to_dict()["timings"]["created_at"] == format_timestamp(NOW)


@pytest.mark.parametrize(
    "state",
    [RunState.SUBMITTED, RunState.RUNNING, RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED, RunState.REJECTED],
)
def test_a_duplicate_delivery_of_a_submitted_or_ended_run_changes_nothing(state: RunState) -> None:
    w = World()
    w.runs.put(replace(new_run(RUN_ID, REQUEST.to_dict(), now=NOW), state=state))
    before = w.doc()
    w.clock.now = NOW + timedelta(hours=1)
    assert w.deliver(message_id="m-2") == f"duplicate:{state}"
    assert w.doc() == before
    assert w.vertex.create_calls == [] and w.planned == []


def test_a_redelivery_after_submission_is_a_duplicate() -> None:
    w = World()
    assert w.deliver() == "submitted"
    before = w.doc()
    assert w.deliver(message_id="m-2") == "duplicate:SUBMITTED"
    assert w.doc() == before and len(w.vertex.jobs) == 1


@pytest.mark.parametrize("data", [b"\x00not json", b"[1, 2]", b'"a string"'])
def test_an_unreadable_message_is_dropped_without_a_run(data: bytes) -> None:
    w = World()
    assert w.deliver(data) == "dropped:unreadable"
    assert w.runs.docs == {} and w.vertex.create_calls == []


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"idempotency_key": "k-1", "task": 5}, "k-1"),
        ({"task": "tabular-classification"}, "pubsub-message:m-9"),
        ({"idempotency_key": "  "}, "pubsub-message:m-9"),
    ],
)
def test_an_invalid_message_becomes_a_rejected_run_named_by_its_key(raw: dict, key: str) -> None:
    w = World()
    assert w.deliver(json.dumps(raw).encode(), message_id="m-9") == "rejected:invalid-request"
    run = w.run(run_id_for(key))
    assert run.state == RunState.REJECTED and states(run) == ["REJECTED"]
    assert run.request == raw
    assert run.error is not None and run.error.code == "invalid-request" and run.history[0].detail == run.error.message
    assert w.planned == [] and w.vertex.create_calls == []
    before = w.doc(run.run_id)
    assert w.deliver(json.dumps(raw).encode(), message_id="m-9") == "rejected:invalid-request"
    assert w.doc(run.run_id) == before


def test_a_request_breaking_the_rules_is_rejected_with_every_problem() -> None:
    data = json.loads(REQUEST_JSON)
    data["model"]["preset"] = "gpt-tiny"
    data["dataset"]["uri"] = "gs://elsewhere/data/"
    w = World()
    assert w.deliver(json.dumps(data).encode()) == "rejected:invalid-request"
    run = w.run()
    assert states(run) == ["RECEIVED", "REJECTED"]
    assert run.error is not None and "needs a mlp preset" in run.error.message
    assert "bucket 'elsewhere' is not one Landfall reads from" in run.error.message
    assert w.planned == [] and w.vertex.create_calls == []


@pytest.mark.parametrize(
    ("rejection", "message"),
    [("needs 80 GB per GPU; allow NVIDIA_H100_80GB", None), (None, "no machine shape fits this request")],
)
def test_an_infeasible_request_is_rejected_with_the_planner_reason(rejection: str | None, message: str | None) -> None:
    w = World(Outcome(None, (), rejection))
    assert w.deliver() == "rejected:infeasible"
    run = w.run()
    assert states(run) == ["RECEIVED", "REJECTED"] and run.plan is None
    assert run.error is not None and (run.error.code, run.error.message) == ("infeasible", message or rejection)
    assert w.vertex.create_calls == []


@pytest.mark.parametrize(
    "refusal",
    [
        gexc.ResourceExhausted("Quota exceeded for aiplatform.googleapis.com/cpus"),
        gexc.InvalidArgument('Machine type "e2-standard-4" is not supported.'),
    ],
)
def test_a_capacity_refusal_falls_back_to_the_next_plan(refusal: Exception) -> None:
    w = World()
    w.vertex.refuse("us-central1", refusal)
    assert w.deliver() == "submitted"
    run = w.run()
    assert w.vertex.create_calls == ["us-central1", "europe-west4"]
    assert run.plan == FALLBACK_1 and run.vertex is not None and run.vertex.region == "europe-west4"
    outcomes = [a.outcome for a in run.submission.attempts or ()]
    assert outcomes[0].startswith("capacity: CreateCustomJob in us-central1") and outcomes[1:] == ["created"]
    assert states(run)[-1] == "SUBMITTED"


def test_no_capacity_anywhere_makes_the_run_wait_with_every_reason() -> None:
    w = World()
    for region in ("us-central1", "europe-west4", "asia-east1"):
        w.vertex.refuse(region, gexc.ResourceExhausted(f"no quota in {region}"))
    assert w.deliver() == "waiting:no-capacity"
    run = w.run()
    assert states(run) == ["RECEIVED", "PLANNED", "SUBMITTING", "WAITING"] and run.vertex is None
    wait = run.submission.waiting
    assert wait is not None and wait.retry_at == format_timestamp(NOW + timedelta(seconds=60)) and wait.tries == 1
    for region in ("us-central1", "europe-west4", "asia-east1"):
        assert f"no quota in {region}" in wait.reason
    assert "raise quota" in wait.reason
    assert w.deliver() == "duplicate:WAITING"
    assert [a.outcome.split(":")[0] for a in run.submission.attempts or ()] == ["capacity"] * 3
    assert w.vertex.jobs == {}


def test_a_permanent_refusal_fails_the_run_without_trying_fallbacks() -> None:
    w = World()
    w.vertex.refuse("us-central1", gexc.PermissionDenied("the service account may not create jobs"))
    assert w.deliver() == "failed:submit-refused"
    run = w.run()
    assert run.state == RunState.FAILED and w.vertex.create_calls == ["us-central1"]
    assert run.error is not None and run.error.code == "submit-refused"
    assert "may not create jobs" in run.error.message
    (attempt,) = run.submission.attempts or ()
    assert attempt.outcome.startswith("refused: ")


def test_a_transient_error_gives_the_lease_back_and_the_retry_submits() -> None:
    w = World()
    w.vertex.refuse("us-central1", gexc.ServiceUnavailable("try again"))
    with pytest.raises(TransientError, match="Vertex AI unavailable"):
        w.deliver()
    run = w.run()
    assert run.state == RunState.SUBMITTING and run.submission.lease_until == format_timestamp(NOW)
    assert [a.outcome for a in run.submission.attempts or ()] == ["pending"]
    assert w.deliver(message_id="m-2") == "submitted", "the retry need not wait for the lease"
    run = w.run()
    assert [a.outcome for a in run.submission.attempts or ()] == ["pending", "created"]
    assert len(w.vertex.jobs) == 1 and states(run).count("SUBMITTING") == 1


def test_a_live_claim_is_busy_and_an_expired_one_recovers_the_job_it_made() -> None:
    w = World()
    w.vertex.crash_on_create("us-central1", after_creating=True)
    with pytest.raises(Crash):
        w.deliver()
    (job_name,) = w.vertex.jobs
    w.clock.now = NOW + LEASE - timedelta(seconds=1)
    with pytest.raises(TransientError, match="another delivery is submitting it"):
        w.deliver(message_id="m-2")
    assert w.run().state == RunState.SUBMITTING
    w.clock.now = NOW + LEASE + timedelta(seconds=1)
    assert w.deliver(message_id="m-3") == "recovered"
    run = w.run()
    assert run.state == RunState.SUBMITTED and run.vertex is not None and run.vertex.job_name == job_name
    assert w.vertex.create_calls == ["us-central1"] and len(w.vertex.jobs) == 1
    assert run.plan == PLAN and [a.outcome for a in run.submission.attempts or ()] == ["pending"]
    assert run.timings.submitted_at == format_timestamp(w.clock.now)


def test_recovery_keeps_the_plan_of_the_region_where_the_job_was_found() -> None:
    w = World()
    w.vertex.refuse("us-central1", gexc.ResourceExhausted("no quota"))
    w.vertex.crash_on_create("europe-west4", after_creating=True)
    with pytest.raises(Crash):
        w.deliver()
    w.clock.now = NOW + LEASE + timedelta(seconds=1)
    assert w.deliver(message_id="m-2") == "recovered"
    run = w.run()
    assert run.plan == FALLBACK_1 and run.vertex is not None and run.vertex.region == "europe-west4"


def test_an_expired_claim_with_no_job_found_submits_again() -> None:
    w = World()
    w.vertex.crash_on_create("us-central1", after_creating=False)
    with pytest.raises(Crash):
        w.deliver()
    assert w.vertex.jobs == {}
    w.clock.now = NOW + LEASE + timedelta(seconds=1)
    assert w.deliver(message_id="m-2") == "submitted"
    run = w.run()
    assert [a.outcome for a in run.submission.attempts or ()] == ["pending", "created"]
    assert len(w.vertex.jobs) == 1 and run.state == RunState.SUBMITTED


class LostPlanning(FakeRuns):
    """A store whose move to PLANNED (made in the claim's transaction) never lands: the claim finds it RECEIVED."""

    def claim_submission(self, run_id, **kwargs):
        kwargs.pop("before", None)
        return super().claim_submission(run_id, **kwargs)


def test_a_run_not_planned_yet_is_retried() -> None:
    w = World(runs=LostPlanning())
    with pytest.raises(TransientError, match="not planned yet"):
        w.deliver()
    assert w.run().state == RunState.RECEIVED and w.vertex.create_calls == []


class Interleaved(FakeRuns):
    """A store where another delivery of the same message runs to the end just before this one claims."""

    def __init__(self) -> None:
        super().__init__()
        self.other: World | None = None

    def claim_submission(self, run_id, **kwargs):
        other, self.other = self.other, None
        if other is not None:
            assert other.deliver(message_id="m-other") == "submitted"
        return super().claim_submission(run_id, **kwargs)


def test_a_run_submitted_by_a_concurrent_delivery_is_a_duplicate() -> None:
    runs = Interleaved()
    w = World(runs=runs)
    runs.other = World(runs=runs)
    runs.other.vertex = w.vertex
    runs.other.dispatch_deps = replace(runs.other.dispatch_deps, vertex=w.vertex)  # type: ignore[arg-type]  # a FakeVertex
    assert w.deliver() == "duplicate:SUBMITTED"
    assert len(w.vertex.jobs) == 1 and states(w.run()).count("SUBMITTED") == 1


def test_a_submitting_run_without_a_plan_is_refused_with_what_to_do() -> None:
    w = World()
    w.runs.put(replace(new_run(RUN_ID, REQUEST.to_dict(), now=NOW), state=RunState.SUBMITTING))
    with pytest.raises(PermanentError, match=r"has no plan .*delete the run document"):
        w.deliver()
    assert w.vertex.create_calls == []


def _slow_create(w: World, *, take_over: str) -> list[str]:
    """The first CreateCustomJob outlives the submission lease: while it is in flight another delivery takes the
    claim over, before the job exists (take_over="before") or once it exists (take_over="after")."""
    real_create, answers = w.vertex.create, []

    def create(region: str, custom_job: dict[str, Any]) -> JobView:
        w.vertex.create = real_create  # type: ignore[method-assign]
        if take_over == "before":
            w.clock.now = NOW + LEASE + timedelta(seconds=1)
            answers.append(w.deliver(message_id="m-2"))
            return real_create(region, custom_job)
        job = real_create(region, custom_job)
        w.clock.now = NOW + LEASE + timedelta(seconds=1)
        answers.append(w.deliver(message_id="m-2"))
        return job

    w.vertex.create = create  # type: ignore[method-assign]
    return answers


def test_a_delivery_that_outlived_its_lease_cancels_its_second_job_and_records_it_as_superseded() -> None:
    """Fault campaign (tests/campaign): a CreateCustomJob slower than the lease made two jobs for one attempt, the
    later record overwrote the earlier, and the other job ran on, unknown to the run."""
    w = World()
    answers = _slow_create(w, take_over="before")
    assert w.deliver() == "superseded"
    assert answers == ["submitted"], "the delivery that took over found no job yet and submitted one"
    run = w.run()
    assert run.vertex is not None and len(w.vertex.jobs) == 2
    (superseded,) = run.submission.jobs or ()
    (second,) = set(w.vertex.jobs) - {run.vertex.job_name}
    assert superseded.job_name == second and superseded.reason == "superseded" and superseded.round == -1
    assert second.rsplit("/", 1)[-1] in (run.submission.job_ids or ())
    assert w.vertex.cancelled == [second]
    assert run.state == RunState.SUBMITTED and states(run).count("SUBMITTED") == 1


def test_a_delivery_that_outlived_its_lease_leaves_its_job_to_the_delivery_that_adopted_it() -> None:
    w = World()
    answers = _slow_create(w, take_over="after")
    assert w.deliver() == "adopted"
    assert answers == ["recovered"]
    run = w.run()
    (job_name,) = w.vertex.jobs
    assert run.vertex is not None and run.vertex.job_name == job_name and not run.submission.jobs
    assert w.vertex.cancelled == [] and run.state == RunState.SUBMITTED


def test_a_recovering_delivery_does_not_adopt_a_job_its_creator_cancelled_as_superseded_meanwhile() -> None:
    """make test (e2e, ten datasets while the dispatcher is killed): a delivery whose claim was taken over recorded its
    late job as superseded and cancelled it after the recovering delivery had read the run but before it recorded
    the job it found by label; the recovering delivery adopted the cancelled job and the run ended CANCELLED."""
    w = World()
    real_create, real_find = w.vertex.create, w.vertex.find_by_run
    answers: list[str] = []

    def find_then_superseded(region: str, run_id: str, *, canary: bool = False) -> JobView | None:
        found = real_find(region, run_id, canary=canary)
        assert found is not None, "the slow delivery's job carries the run label"
        # What the slow delivery's transaction does once its CreateCustomJob returns: record and cancel its job.
        w.runs.apply(run_id, job_record.submitted_step(found, "the-slow-delivery", w.clock.now, lambda r: r))
        w.vertex.cancel(found.name)
        return found

    def slow_create(region: str, custom_job: dict[str, Any]) -> JobView:
        w.vertex.create = real_create  # type: ignore[method-assign]
        job = real_create(region, custom_job)
        w.clock.now = NOW + LEASE + timedelta(seconds=1)
        w.vertex.find_by_run = find_then_superseded  # type: ignore[method-assign]
        answers.append(w.deliver(message_id="m-2"))
        w.vertex.find_by_run = real_find  # type: ignore[method-assign]
        return job

    w.vertex.create = slow_create  # type: ignore[method-assign]
    assert w.deliver() == "adopted", "the slow delivery finds its job recorded (as superseded) and records nothing"
    assert answers == ["submitted"], "the recovering delivery submitted a new job instead of adopting the cancelled one"
    run = w.run()
    (superseded,) = run.submission.jobs or ()
    assert superseded.reason == "superseded" and superseded.job_name in w.vertex.cancelled
    assert run.vertex is not None and run.vertex.job_name != superseded.job_name
    assert run.vertex.job_name not in w.vertex.cancelled and len(w.vertex.jobs) == 2
    assert run.state == RunState.SUBMITTED


def test_a_delivery_whose_claim_was_taken_over_while_a_plan_was_refused_creates_no_job_on_the_next() -> None:
    """Fault campaign: a delivery slowed past its lease went on to its next plan while the delivery that took over
    created a job (its stale attempt list overwrote the other's, too). The first attempt is recorded by the claim
    itself, just before CreateCustomJob; every later attempt is recorded only while the claim is still this
    delivery's, so a delivery that lost it creates nothing more."""
    from functions.gcp.vertex import CapacityError

    w = World()
    create, answers = w.vertex.create, []

    def slow_refusal(region, custom_job):
        w.vertex.create = create  # type: ignore[method-assign]
        w.clock.now = NOW + LEASE + timedelta(seconds=1)
        answers.append(w.deliver(message_id="m-2"))  # takes the lapsed claim over and submits
        raise CapacityError(f"{region}: no capacity now")

    w.vertex.create = slow_refusal  # type: ignore[method-assign]
    assert w.deliver() == "lost-claim"
    assert answers == ["submitted"]
    run = w.run()
    assert len(w.vertex.jobs) == 1 and w.vertex.create_calls == ["us-central1"]
    # The lapsed delivery's attempt stays pending on record (its outcome was never written); the taker's created.
    assert run.state == RunState.SUBMITTED and [a.outcome for a in run.submission.attempts or ()] == [
        "pending",
        "created",
    ]


class TransactionCountingRuns(FakeRuns):
    """Counts the transactions opened on run documents."""

    def __init__(self) -> None:
        super().__init__()
        self.transactions = 0

    def apply(self, run_id, step):
        self.transactions += 1
        return super().apply(run_id, step)


def test_a_redelivery_storm_of_a_submitted_run_opens_no_transaction() -> None:
    """Fault campaign: 5-20 copies of one request at once each opened a transaction on the same run document, and
    they collided until they were retried for minutes."""
    runs = TransactionCountingRuns()
    w = World(runs=runs)
    assert w.deliver() == "submitted"
    before = runs.transactions
    for n in range(20):
        assert w.deliver(message_id=f"storm-{n}") == "duplicate:SUBMITTED"
    assert runs.transactions == before


def test_a_redelivery_storm_while_another_delivery_submits_opens_no_transaction() -> None:
    """Fault campaign: a storm of 17 copies arriving while the run was SUBMITTING opened two transactions each, so the
    claim holder's own writes (and the reconciler's) collided with them and the run stayed SUBMITTING for minutes."""
    runs = TransactionCountingRuns()
    w = World(runs=runs)
    w.vertex.crash_on_create("us-central1", after_creating=False)
    with pytest.raises(Crash):
        w.deliver()
    before = runs.transactions
    w.clock.now = NOW + timedelta(seconds=1)
    for n in range(10):
        with pytest.raises(TransientError, match="another delivery is submitting it"):
            w.deliver(message_id=f"storm-{n}")
    assert runs.transactions == before
    w.clock.now = NOW + LEASE + timedelta(seconds=1)
    assert w.deliver(message_id="after-lease") == "submitted"


class CreateCountingRuns(FakeRuns):
    """Counts the creates tried."""

    def __init__(self) -> None:
        super().__init__()
        self.creates = 0

    def create_if_absent(self, run):
        self.creates += 1
        return super().create_if_absent(run)


def test_a_request_handed_over_for_a_run_that_exists_reads_it_instead_of_creating_it() -> None:
    """A woken run's request comes back with RUN_ID_ATTRIBUTE (functions/wiring.py hand_over): the dispatcher reads
    the run first, and makes no create that Firestore would refuse; set on a request whose run does not exist (by
    anyone), the run is created as usual."""
    from functions.dispatch.handler import handle_training_request
    from functions.envelopes import PubSubMessage
    from schemas.training_request import RUN_ID_ATTRIBUTE

    runs = CreateCountingRuns()
    w = World(runs=runs)
    handed = {RUN_ID_ATTRIBUTE: RUN_ID}
    first = PubSubMessage(data=REQUEST_JSON, message_id="m-1", attributes=handed)
    assert handle_training_request(first, w.dispatch_deps) == "submitted"
    assert runs.creates == 1, "no run yet: created as usual"
    again = PubSubMessage(data=REQUEST_JSON, message_id="m-2", attributes=handed)
    assert handle_training_request(again, w.dispatch_deps) == "duplicate:SUBMITTED"
    assert runs.creates == 1, "the run exists: read, not created"
    other = PubSubMessage(data=REQUEST_JSON, message_id="m-3", attributes={RUN_ID_ATTRIBUTE: "run-someone-else"})
    assert handle_training_request(other, w.dispatch_deps) == "duplicate:SUBMITTED"
    assert runs.creates == 2, "an attribute naming another run changes nothing"


def test_the_plans_reads_are_started_before_the_run_is_created_and_not_for_a_woken_run() -> None:
    w = World()
    seen: list[tuple[str, bool]] = []

    def prefetch(request: Any) -> None:
        seen.append((request.run_id, w.runs.get(request.run_id) is not None))

    w.dispatch_deps = replace(w.dispatch_deps, prefetch=prefetch)
    assert w.deliver().startswith("submitted")
    assert seen == [(RUN_ID, False)], "started once, before the run existed"
