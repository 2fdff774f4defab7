"""Rate limits are not capacity, through the real adapters: a burst of requests dispatched with the runs store and the
limiter's buckets on the Firestore emulator, and VertexJobs on the Vertex emulator with a low CreateCustomJob rate
limit. Every run ends created on its own plan (some queued on the way), none moves to a fallback plan for a rate
limit, none is lost and none has two jobs."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deploy.vertex_emulator import control
from functions.dispatch.handler import DispatchDeps, attempt_policy, handle_training_request, resubmit
from functions.envelopes import PubSubMessage
from functions.gcp.rate_limits_store import RateLimitsStore
from functions.gcp.runs_store import RunsStore
from functions.gcp.vertex import RUN_LABEL, VertexJobs
from functions.listener.handler import ListenerDeps
from functions.reconciler.handler import OPEN_STATES, ReconcilerDeps, _reconcile
from schemas.run_record import RunRecord, RunState
from schemas.vocabulary import SUBMIT_RATE, VERTEX_RATE_LIMIT
from tests.conftest import PROJECT
from tests.fakes.ingest import Clock
from tests.fakes.world import FALLBACK_1, PLAN, REQUEST, SETTINGS, Outcome
from tests.polling import wait_for

BURST = 8
REGIONS = (PLAN.region, FALLBACK_1.region)


@pytest.fixture(scope="module")
def vertex_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Vertex emulator whose trainer image exits at once (the jobs here only need to exist)."""
    from tests.integration.vertex_emulator.harness import emulator_running

    trainer = [sys.executable, "-c", "pass"]
    process = emulator_running(tmp_path_factory.mktemp("vertex-rate-limits"), {SETTINGS.trainer_image: trainer})
    yield process
    process.stop()


@dataclass
class Stack:
    runs: RunsStore
    vertex: VertexJobs
    emulator: Any
    deps: DispatchDeps
    now: Callable[[], datetime]
    keys: list[str]

    def burst(self) -> list[str]:
        """Deliver BURST fresh requests at once (one thread each, as concurrent function instances would)."""

        def deliver(key: str) -> str:
            body = replace(REQUEST, idempotency_key=key).to_json()
            return handle_training_request(PubSubMessage(data=body, message_id=key), self.deps)

        with ThreadPoolExecutor(max_workers=BURST) as pool:
            return list(pool.map(deliver, self.keys))

    def all_runs(self) -> list[RunRecord]:
        runs = [self.runs.get(replace(REQUEST, idempotency_key=key).run_id) for key in self.keys]
        assert all(run is not None for run in runs), "a run of the burst is lost"
        return [run for run in runs if run is not None]

    def reconcile(self) -> str:
        listener = ListenerDeps(store=self.runs, vertex=self.vertex, read_text=lambda uri: None, now=self.now)
        return _reconcile(
            ReconcilerDeps(
                open_runs=lambda: self.runs.in_states(OPEN_STATES),
                vertex=self.vertex,
                listener=listener,
                resubmit=lambda run_id: resubmit(run_id, self.deps),
                policy=attempt_policy(SETTINGS),
                lease_seconds=SETTINGS.submission_lease_seconds,
                now=self.now,
            )
        )

    def jobs_by_run(self) -> dict[str, list[tuple[str, str]]]:
        """run id -> (region, job name) of every labelled job on the emulator, in both regions a plan names."""
        found: dict[str, list[tuple[str, str]]] = {}
        for region in REGIONS:
            for job in self.vertex.list_labelled(region):
                found.setdefault(job.labels.get(RUN_LABEL, ""), []).append((region, job.name))
        return found

    def created_and_calls(self) -> dict[str, Any]:
        """The emulator's calls let through and refused per "METHOD REGION" since the test set its plan."""
        calls = control.get_faults(self.emulator.address)["calls"]
        assert isinstance(calls, dict)
        return calls

    def check_every_run_created_once_on_its_plan(self) -> list[RunRecord]:
        runs = self.all_runs()
        jobs = self.jobs_by_run()
        for run in runs:
            assert run.state in (RunState.SUBMITTED, RunState.RUNNING, RunState.SUCCEEDED), run.state
            assert run.vertex is not None and run.vertex.region == PLAN.region, "moved off its plan"
            assert jobs.get(run.run_id) == [(PLAN.region, run.vertex.job_name)], "lost or doubled"
            regions = {a.region for a in run.submission.attempts or ()}
            assert regions == {PLAN.region}, f"a rate limit sent {run.run_id} to a fallback: {regions}"
            outcomes = [a.outcome for a in run.submission.attempts or ()]
            assert not any(o.startswith("capacity") for o in outcomes), outcomes
        return runs


def _stack(runs_client: Any, emulator: Any, now: Callable[[], datetime], limiter: RateLimitsStore | None) -> Stack:
    deps = DispatchDeps(
        settings=SETTINGS,
        store=RunsStore(runs_client, "runs"),
        vertex=VertexJobs(PROJECT, lambda region: emulator.client),
        plan=lambda request: Outcome(PLAN, (FALLBACK_1,)),
        now=now,
        limiter=limiter,
    )
    keys = [f"issue-26-{uuid.uuid4().hex}" for _ in range(BURST)]
    return Stack(deps.store, deps.vertex, emulator, deps, now, keys)


@pytest.fixture
def firestore_client(clean_firestore: Any) -> Any:
    from google.cloud import firestore

    return firestore.Client(project=PROJECT)


@pytest.fixture
def limits(vertex_emulator: Any) -> Iterator[Callable[[dict[str, Any]], None]]:
    def set_plan(plan: dict[str, Any]) -> None:
        control.set_faults(vertex_emulator.address, plan)

    yield set_plan
    control.set_faults(vertex_emulator.address, {})


def test_vertex_rate_limits_queue_a_burst_on_its_plan_until_every_run_is_created(
    firestore_client: Any, vertex_emulator: Any, limits: Callable[[dict[str, Any]], None]
) -> None:
    """No limiter of Landfall's: Vertex (the emulator) refuses every CreateCustomJob past 3 in 4 s in a region. The
    refused runs are queued (vertex-rate-limit) and created on their own plan later, never on the fallback."""
    limits({"rate_limits": [{"method": "CreateCustomJob", "limit": 3, "window_seconds": 4}]})
    clock = Clock(datetime.now(UTC))
    stack = _stack(firestore_client, vertex_emulator, clock, limiter=None)
    said = stack.burst()
    assert set(said) <= {"submitted", f"queued:{VERTEX_RATE_LIMIT}"}, said
    assert said.count("submitted") >= 1 and f"queued:{VERTEX_RATE_LIMIT}" in said, said
    queued = [run for run in stack.all_runs() if run.state == RunState.SUBMITTING]
    assert queued and all(r.submission.queued and r.submission.queued.reason == VERTEX_RATE_LIMIT for r in queued)

    def drained() -> bool:
        clock.now += timedelta(minutes=2)  # past every retry_at: the reconciler takes the queued runs over
        stack.reconcile()
        return all(run.state != RunState.SUBMITTING for run in stack.all_runs())

    wait_for(drained, 120, what="every queued run created", step=0.5)
    runs = stack.check_every_run_created_once_on_its_plan()
    was_queued = [r for r in runs if r.submission.queued is not None]
    assert len(was_queued) == said.count(f"queued:{VERTEX_RATE_LIMIT}")
    assert all(r.submission.queued and r.submission.queued.over_at for r in was_queued), "queued, then created"
    calls = stack.created_and_calls()
    assert calls[f"CreateCustomJob {PLAN.region}"]["refused"] >= len(was_queued)
    assert f"CreateCustomJob {FALLBACK_1.region}" not in calls, "nothing was tried on the fallback plan"


def test_the_limiter_keeps_a_burst_under_vertex_s_limit(
    firestore_client: Any, vertex_emulator: Any, limits: Callable[[dict[str, Any]], None]
) -> None:
    """Landfall's limiter at 15 a minute (a slot every 4 s) under the emulator's 3 in 6 s: runs wait a few seconds
    or are queued (submit-rate) with a reserved slot, Vertex never refuses one, and all are created on their plan."""
    limits({"rate_limits": [{"method": "CreateCustomJob", "limit": 3, "window_seconds": 6}]})

    def now() -> datetime:
        return datetime.now(UTC)

    limiter = RateLimitsStore(firestore_client, SETTINGS.rate_limits_collection, per_minute=15)
    stack = _stack(firestore_client, vertex_emulator, now, limiter=limiter)
    said = stack.burst()
    assert set(said) <= {"submitted", f"queued:{SUBMIT_RATE}"}, said
    assert f"queued:{SUBMIT_RATE}" in said, said

    def drained() -> bool:
        stack.reconcile()
        return all(run.state != RunState.SUBMITTING for run in stack.all_runs())

    wait_for(drained, 120, what="every queued run created at its slot", step=1.0)
    runs = stack.check_every_run_created_once_on_its_plan()
    queued = [r for r in runs if r.submission.queued is not None]
    assert len(queued) == said.count(f"queued:{SUBMIT_RATE}")
    assert all(q.submission.queued and q.submission.queued.over_at for q in queued)
    calls = stack.created_and_calls()[f"CreateCustomJob {PLAN.region}"]
    assert calls == {"calls": BURST, "refused": 0}, calls
