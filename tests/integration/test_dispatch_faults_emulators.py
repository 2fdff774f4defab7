"""Fault campaign holes, through the real adapters: the dispatcher and the reconciler with the runs store on the
Firestore emulator and VertexJobs on the Vertex emulator (its fault plan answers UNAVAILABLE; a job's replica is a
real process, here a sleeper standing in for the trainer image). Each test counts the labelled jobs on the emulator:
never two for one run."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deploy.vertex_emulator import control
from functions.dispatch.handler import DispatchDeps, attempt_policy, handle_training_request, resubmit
from functions.envelopes import PubSubMessage
from functions.errors import TransientError
from functions.gcp.runs_store import RunsStore
from functions.gcp.vertex import JobView, VertexJobs
from functions.listener.handler import ListenerDeps
from functions.reconciler.cancel import cancel_run
from functions.reconciler.handler import OPEN_STATES, ReconcilerDeps, _reconcile
from functions.records.results import announce
from schemas.run_finished import RunFinished
from schemas.run_record import RunRecord, RunState
from schemas.times import format_timestamp
from schemas.training_request import TrainingRequest
from tests.conftest import PROJECT
from tests.fakes.ingest import Clock
from tests.fakes.world import FALLBACK_1, PLAN, REQUEST, REQUEST_JSON, SETTINGS, Outcome
from tests.polling import wait_for

REGION = "us-central1"
LEASE = timedelta(seconds=SETTINGS.submission_lease_seconds)
ENDED = ("JOB_STATE_CANCELLED", "JOB_STATE_FAILED", "JOB_STATE_SUCCEEDED")


@pytest.fixture(scope="module")
def vertex_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Vertex emulator whose trainer image runs a sleeper (the jobs here are cancelled, never trained)."""
    from tests.integration.vertex_emulator.harness import emulator_running

    trainer = [sys.executable, "-c", "import time; time.sleep(300)"]
    process = emulator_running(tmp_path_factory.mktemp("vertex-dispatch-faults"), {SETTINGS.trainer_image: trainer})
    yield process
    process.stop()


@dataclass
class Stack:
    runs: RunsStore
    vertex: VertexJobs
    emulator: Any
    clock: Clock
    deps: DispatchDeps
    request: TrainingRequest
    """The test's own request (a fresh key: the module's Vertex emulator keeps the other tests' jobs)."""

    def deliver(self, data: bytes | None = None, message_id: str = "m-1") -> str:
        body = self.request.to_json() if data is None else data
        return handle_training_request(PubSubMessage(data=body, message_id=message_id), self.deps)

    def run(self, run_id: str | None = None) -> RunRecord:
        run = self.runs.get(run_id or self.request.run_id)
        assert run is not None, f"no run {run_id or self.request.run_id} on the Firestore emulator"
        return run

    def jobs(self, run_id: str | None = None) -> list[JobView]:
        """The run's labelled jobs on the Vertex emulator, in every region a plan names."""
        regions = (REGION, FALLBACK_1.region)
        wanted = run_id or self.request.run_id
        return [j for region in regions for j in self.vertex.list_labelled(region) if _of(j, wanted)]

    def reconciler(self) -> ReconcilerDeps:
        listener = ListenerDeps(store=self.runs, vertex=self.vertex, read_text=lambda uri: None, now=self.clock)
        return ReconcilerDeps(
            open_runs=lambda: self.runs.in_states(OPEN_STATES),
            vertex=self.vertex,
            listener=listener,
            resubmit=lambda run_id: resubmit(run_id, self.deps),
            policy=attempt_policy(SETTINGS),
            lease_seconds=SETTINGS.submission_lease_seconds,
            now=self.clock,
        )

    def cancel_every_job(self) -> None:
        for job in self.jobs():
            if job.state not in ENDED:
                self.vertex.cancel(job.name)


def _of(job: JobView, run_id: str) -> bool:
    from functions.gcp.vertex import RUN_LABEL

    return job.labels.get(RUN_LABEL) == run_id


@pytest.fixture
def stack(clean_firestore: Any, vertex_emulator: Any) -> Iterator[Stack]:
    from google.cloud import firestore

    control.set_faults(vertex_emulator.address, {})
    runs = RunsStore(firestore.Client(project=PROJECT), "runs")
    vertex = VertexJobs(PROJECT, lambda region: vertex_emulator.client)
    clock = Clock(datetime.now(UTC))
    deps = DispatchDeps(
        settings=SETTINGS, store=runs, vertex=vertex, plan=lambda request: Outcome(PLAN, (FALLBACK_1,)), now=clock
    )
    request = replace(REQUEST, idempotency_key=f"issue-28-{uuid.uuid4().hex}")
    made = Stack(runs, vertex, vertex_emulator, clock, deps, request)
    yield made
    control.set_faults(vertex_emulator.address, {})
    made.cancel_every_job()


def test_a_run_left_received_is_taken_over_by_the_reconciler_and_submitted_once(stack: Stack) -> None:
    """Item 11: every delivery records the run and fails; once the lease's time has passed the reconciler plans and
    submits it from the request kept on the run, and a second pass or a late redelivery submits nothing more."""

    def broken(request: object) -> Outcome:
        raise RuntimeError("the dispatcher fails after recording the run")

    healthy = stack.deps
    stack.deps = replace(healthy, plan=broken)
    for attempt in range(3):
        with pytest.raises(RuntimeError):
            stack.deliver(message_id=f"m-{attempt}")
    assert stack.run().state == RunState.RECEIVED and stack.jobs() == []
    stack.deps = healthy
    stack.clock.now += LEASE + timedelta(seconds=1)
    assert _reconcile(stack.reconciler()) == "resubmitted=1"
    run = stack.run()
    assert [h.state for h in run.history] == ["RECEIVED", "PLANNED", "SUBMITTING", "SUBMITTED"]
    (job,) = stack.jobs()
    assert run.vertex is not None and run.vertex.job_name == job.name
    assert stack.deliver(message_id="m-late") == "duplicate:SUBMITTED"
    assert "resubmitted" not in _reconcile(stack.reconciler()) and len(stack.jobs()) == 1


def test_a_cancel_while_submitting_creates_no_job_and_a_job_created_meanwhile_is_cancelled_at_once(
    stack: Stack,
) -> None:
    """Item 12, both ways. First: CreateCustomJob answered UNAVAILABLE, `landfall cancel` came, the redelivery ends
    the run CANCELLED with no job. Second (another run): the cancel lands while the job is being created; the
    delivery cancels that job on the emulator at once."""
    control.set_faults(stack.emulator.address, {"unavailable_calls": 1})
    with pytest.raises(TransientError, match="unavailable"):
        stack.deliver()
    said = cancel_run(stack.request.run_id, by="ada", store=stack.runs, vertex=stack.vertex, now=stack.clock.now)
    assert "is being submitted" in said
    assert stack.deliver(message_id="m-2") == "cancelled:before-create"
    run = stack.run()
    assert run.state == RunState.CANCELLED and run.error is not None and "by ada" in run.error.message
    assert stack.jobs() == []

    other = replace(stack.request, idempotency_key=f"{stack.request.idempotency_key}-other")
    create = stack.vertex.create

    def create_while_cancelled(region: str, custom_job: dict[str, Any]) -> JobView:
        cancel_run(other.run_id, by="ada", store=stack.runs, vertex=stack.vertex, now=stack.clock.now)
        return create(region, custom_job)

    stack.vertex.create = create_while_cancelled  # type: ignore[method-assign]
    assert stack.deliver(other.to_json(), message_id="m-3") == "submitted:cancel-requested"
    (job,) = stack.jobs(other.run_id)
    assert wait_for(lambda: stack.vertex.get(job.name).state in ENDED, 60, what="the job cancelled")
    assert stack.vertex.get(job.name).state == "JOB_STATE_CANCELLED"


def test_deliveries_failing_before_create_give_the_claim_back_and_the_run_is_submitted_without_the_lease(
    stack: Stack,
) -> None:
    """Item 14: the Vertex emulator answers UNAVAILABLE three times (the first CreateCustomJob, then the recovering
    deliveries' ListCustomJobs). No delivery keeps the 120 s lease: the fourth, seconds later, submits."""
    control.set_faults(stack.emulator.address, {"unavailable_calls": 3})
    start = stack.clock.now
    for attempt in range(3):
        stack.clock.now = start + timedelta(seconds=5 * attempt)
        with pytest.raises(TransientError, match="unavailable"):
            stack.deliver(message_id=f"m-{attempt}")
        run = stack.run()
        assert run.state == RunState.SUBMITTING
        assert run.submission.lease_until == format_timestamp(stack.clock.now), f"delivery {attempt + 1} kept it"
    stack.clock.now = start + timedelta(seconds=15)
    assert stack.deliver(message_id="m-3") == "submitted"
    assert stack.run().state == RunState.SUBMITTED and len(stack.jobs()) == 1


def test_requests_rejected_unread_are_found_unannounced_and_announced(stack: Stack) -> None:
    """Items 15 and 13: a NaN learning rate, a 10 KB key and a 9 MB request are REJECTED at once (the 9 MB one's
    record written cut, within Firestore's 1 MiB document); Firestore's query for unannounced runs finds each, and
    the reconciler's pass announces each once."""
    raw = json.loads(REQUEST_JSON)
    key = stack.request.idempotency_key
    nan = {**raw, "idempotency_key": f"{key}-nan", "hyperparameters": {**raw["hyperparameters"]}}
    nan["hyperparameters"]["learning_rate"] = float("nan")
    long_key = {**raw, "idempotency_key": key * 250}  # over 10 KB
    large = {**raw, "idempotency_key": f"{key}-large", "labels": {"note": "x" * (9 * 1024 * 1024)}}
    for n, body in enumerate((nan, long_key, large)):
        assert stack.deliver(json.dumps(body).encode(), message_id=f"bad-{n}") == "rejected:invalid-request"
    unannounced = {r.run_id: r for r in stack.runs.unannounced()}
    assert len(unannounced) == 3 and {r.state for r in unannounced.values()} == {RunState.REJECTED}
    published: list[RunFinished] = []

    def publish(message: RunFinished) -> str:
        published.append(message)
        return str(len(published))

    deps = replace(
        stack.reconciler(),
        unannounced=stack.runs.unannounced,
        announce=lambda run_id: announce(run_id, stack.runs, publish, now=stack.clock),
    )
    assert _reconcile(deps) == "announced=3"
    assert sorted(m.run_id for m in published) == sorted(unannounced)
    assert {m.reason for m in published} == {"invalid-request"} and list(stack.runs.unannounced()) == []
    assert any("a TrainingRequest is at most" in m.message for m in published)


def test_a_requests_landfall_labels_or_65_labels_change_nothing_landfall_decides_and_a_crash_after_create_gives_one_job(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request built directly (past the refusal of Landfall's labels and of too many) carrying `landfall-phase:
    canary`, another run's `landfall-run-id`, another route's `landfall-route` and 65 labels of its own: the delivery
    dies right after CreateCustomJob; the recovering delivery finds that job by Landfall's own labels and adopts it,
    so one job runs, labelled with the run's id and no phase or route the request gave."""
    from functions.dispatch import request_rules
    from schemas import training_request

    monkeypatch.setattr(training_request, "check_labels", lambda labels, field: labels)
    monkeypatch.setattr(request_rules, "label_problems", lambda request, settings: [])
    hostile = {"landfall-phase": "canary", "landfall-run-id": "another-run", "landfall-route": "regression"}
    stack.request = replace(stack.request, labels={**hostile, **{f"team-{i:02d}": "x" for i in range(65)}})
    create = stack.vertex.create

    def create_then_die(region: str, custom_job: dict[str, Any]) -> JobView:
        create(region, custom_job)
        raise RuntimeError("the instance dies after CreateCustomJob answered")

    stack.vertex.create = create_then_die  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="dies"):
        stack.deliver()
    stack.vertex.create = create  # type: ignore[method-assign]
    stack.clock.now += LEASE + timedelta(seconds=1)
    assert stack.deliver(message_id="m-2") == "recovered"
    (job,) = stack.jobs()
    assert len(job.labels) <= 64 and job.labels["landfall-run-id"] == stack.request.run_id
    assert not {"landfall-phase", "landfall-route"} & set(job.labels), job.labels
    run = stack.run()
    assert run.state == RunState.SUBMITTED and run.vertex is not None and run.vertex.job_name == job.name
    assert any("Landfall's own" in w for w in run.warnings) and any("at most 64" in w for w in run.warnings)
