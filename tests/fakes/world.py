"""The dispatcher and the completion listener wired to the fakes (runs store, Vertex, a clock, GCS text), so a test
can drive a run through its life one delivery at a time and read back the stored record."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from functions.dispatch.handler import DispatchDeps, attempt_policy, handle_training_request, resubmit
from functions.envelopes import PubSubMessage
from functions.listener.handler import ListenerDeps, handle_job_event
from functions.reconciler.handler import OPEN_STATES, ReconcilerDeps
from functions.settings import settings_from_env
from schemas.capacity_event import CapacityEvent
from schemas.plan import Plan, parse_plan
from schemas.run_record import RunRecord
from schemas.training_request import TrainingRequest, parse_training_request
from tests.fakes.documents import copy_document
from tests.fakes.ingest import Clock
from tests.fakes.runs import FakeRuns
from tests.fakes.vertex import FakeVertex

EXAMPLES = Path(__file__).resolve().parents[2] / "schemas" / "examples"
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
# The first-run canary off: the world's runs are about other things (tests/unit/test_canary.py turns it on).
SETTINGS = settings_from_env({"GOOGLE_CLOUD_PROJECT": "landfall-local", "LANDFALL_CANARY_FIRST_RUNS": "0"})
REQUEST_JSON = (EXAMPLES / "training_request.json").read_bytes()
REQUEST: TrainingRequest = parse_training_request(REQUEST_JSON)
RUN_ID = REQUEST.run_id
_CPU_PLAN = parse_plan(json.loads((EXAMPLES / "plan_cpu.json").read_text()))
PLAN = replace(_CPU_PLAN, region="us-central1")
FALLBACK_1 = replace(_CPU_PLAN, region="europe-west4")
FALLBACK_2 = replace(_CPU_PLAN, region="asia-east1", machine_type="n2-standard-4")


@dataclass(frozen=True)
class Outcome:
    """What the planner answers (the fields the dispatcher reads of functions.planning.PlanOutcome)."""

    plan: Plan | None
    fallbacks: tuple[Plan, ...] = ()
    rejection: str | None = None


def job_event(job_id: str, text: str = "Job completed successfully.") -> bytes:
    event = json.loads((EXAMPLES / "job_event.json").read_text())
    event["resource"]["labels"]["job_id"] = job_id
    event["textPayload"] = text
    return json.dumps(event).encode()


class World:
    def __init__(self, outcome: Outcome | None = None, runs: FakeRuns | None = None) -> None:
        self.runs = runs or FakeRuns()
        self.vertex = FakeVertex()
        self.clock = Clock(NOW)
        self.outcome = outcome or Outcome(PLAN, (FALLBACK_1, FALLBACK_2))
        self.planned: list[str] = []
        """Run id of every planner call."""
        self.objects: dict[str, str] = {}
        """gs:// URI -> text, what the listener's read_text finds."""
        self.capacity: list[CapacityEvent] = []
        """Every capacity event the dispatcher and the listener recorded, in order (schemas/capacity_event.py)."""
        # The deps name the Firestore and Vertex adapter classes, not a Protocol the fakes could implement: the
        # fakes stand in for them, and tests/integration/test_adapter_contracts.py checks that they behave alike.
        self.dispatch_deps = DispatchDeps(
            settings=SETTINGS,
            store=self.runs,  # type: ignore[arg-type]
            vertex=self.vertex,  # type: ignore[arg-type]
            plan=self._plan,
            now=self.clock,
            capacity=self.capacity.append,
        )
        self.listener_deps = ListenerDeps(
            store=self.runs,  # type: ignore[arg-type]
            vertex=self.vertex,  # type: ignore[arg-type]
            read_text=self.objects.get,
            now=self.clock,
            capacity=self.capacity.append,
        )

    def _plan(self, request: TrainingRequest) -> Outcome:
        self.planned.append(request.run_id)
        return self.outcome

    def reconciler_deps(self) -> ReconcilerDeps:
        """The reconciler wired to this world: its runs, Vertex, listener and dispatcher (a 120 s lease)."""
        return ReconcilerDeps(
            open_runs=lambda: self.runs.in_states_or_unreadable(OPEN_STATES),
            vertex=self.vertex,  # type: ignore[arg-type]
            listener=self.listener_deps,
            resubmit=lambda run_id: resubmit(run_id, self.dispatch_deps),
            policy=attempt_policy(self.dispatch_deps.settings),
            lease_seconds=120,
            now=self.clock,
            marks=self.runs,
        )

    def deliver(self, data: bytes = REQUEST_JSON, message_id: str = "m-1") -> str:
        """One delivery of a TrainingRequest message to the dispatcher."""
        return handle_training_request(PubSubMessage(data=data, message_id=message_id), self.dispatch_deps)

    def job_event(
        self,
        job_id: str,
        *,
        published_ago: timedelta = timedelta(0),
        publish_time: str | None = None,
        data: bytes | None = None,
    ) -> str:
        """One delivery of a job log entry naming job_id to the listener."""
        stamp = publish_time if publish_time is not None else (self.clock.now - published_ago).isoformat()
        message = PubSubMessage(
            data=data if data is not None else job_event(job_id), message_id="e-1", publish_time=stamp
        )
        return handle_job_event(message, self.listener_deps)

    def run(self, run_id: str = RUN_ID) -> RunRecord:
        run = self.runs.get(run_id)
        assert run is not None, f"no run {run_id} stored"
        return run

    def job_name(self, run_id: str = RUN_ID) -> str:
        """The run's current Vertex job; fails the test when the run has none."""
        vertex = self.run(run_id).vertex
        assert vertex is not None, f"run {run_id} has no Vertex job (state {self.run(run_id).state})"
        return vertex.job_name

    def model_dir(self, run_id: str = RUN_ID) -> str:
        """Where the run's trainer writes its model (metrics.json, the failure file); fails the test when unset."""
        artifacts = self.run(run_id).artifacts
        assert artifacts is not None, f"run {run_id} has no artifacts (state {self.run(run_id).state})"
        return artifacts.model_dir

    def doc(self, run_id: str = RUN_ID) -> dict[str, Any]:
        return copy_document(self.runs.docs[run_id])
