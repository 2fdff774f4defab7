"""What the dispatcher is handed (functions/wiring.py builds it): its stores, Vertex, the planner, the clock, and
the ports of the checks and limits it applies."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from deploy.teams import Teams
from functions.dispatch.dataset_check import DatasetObjects
from functions.dispatch.team_rules import LedgerPort
from functions.gcp.runs_store import RunsStore
from functions.gcp.vertex import VertexJobs
from functions.settings import Settings
from schemas.canary import CanaryFigures
from schemas.capacity_event import CapacityEvent
from schemas.plan import Plan
from schemas.training_request import TrainingRequest


class OutcomeLike(Protocol):
    """What the planner answers (functions.planning.PlanOutcome). Read-only members, so that a frozen dataclass
    (PlanOutcome, the tests' Outcome) satisfies it."""

    @property
    def plan(self) -> Plan | None: ...
    @property
    def fallbacks(self) -> tuple[Plan, ...]: ...
    @property
    def rejection(self) -> str | None: ...


@dataclass(frozen=True)
class DispatchDeps:
    settings: Settings
    store: RunsStore
    vertex: VertexJobs
    plan: Callable[[TrainingRequest], OutcomeLike]
    now: Callable[[], datetime]
    objects: DatasetObjects | None = None
    """The dataset's objects, checked before planning (dataset_check); None skips the check (unit tests)."""
    limiter: SubmitLimiter | None = None
    """The per-region CreateCustomJob limiter (functions/gcp/rate_limits_store.py); None = none (unit tests)."""
    sleep: Callable[[float], None] = time.sleep
    """How the delivery waits for a limiter slot a few seconds away (tests pass their clock's)."""
    champion: Callable[[TrainingRequest], dict[str, str]] | None = None
    """The job's variables naming the route's production model for the trainer to score on the new data
    (functions/records/model_registration.py champion_env); None or {}: no champion to score."""
    replan: Callable[[TrainingRequest, Plan, CanaryFigures], OutcomeLike] | None = None
    """Plans a run again from its canary's figures (functions/dispatch/canary_replan.py); None = `plan` (tests)."""
    teams: Teams | None = None
    """The teams file (deploy/teams.py); None or no teams: every run allowed, no ledger (docs/teams.md)."""
    ingested: Callable[[TrainingRequest], bool] | None = None
    """Whether ingest made the request (functions/records/dataset_versions.py made_by_ingest over ingest's outbox);
    asked only for a request off a team's topic for a team's data. None: nothing is taken for ingest's."""
    ledger: LedgerPort | None = None
    """The team ledger, changed in the claim's transaction (functions/gcp/team_ledger_store.py)."""
    prefetch: Callable[[TrainingRequest], None] | None = None
    """Starts the reads a plan of the request will make (the measurements query) while the run is created; `plan`
    takes them. None: none (unit tests)."""
    capacity: Callable[[CapacityEvent], None] | None = None
    """Records a CreateCustomJob call Vertex refused for capacity in the `capacity_events` collection, which the
    planner prices (functions/records/capacity_events.py); never raises. None: not recorded (unit tests)."""


class SubmitLimiter(Protocol):
    """Hands out CreateCustomJob slots per region (functions/records/rate_limits.py)."""

    @property
    def per_minute(self) -> int:
        """The calls per region and minute it allows."""
        ...

    def take(self, region: str, now: datetime) -> datetime:
        """Reserve the next slot in region: now, or the later moment this call may be made."""
        ...

    def taken_with_claim(self, run_id: str) -> tuple[str, datetime] | None:
        """The region and moment of the slot taken with run_id's claim, in the same write, if one was (the unit of
        work under the stores decides that: functions/gcp/unit_of_work.py); handed over once."""
        ...


__all__ = ["DispatchDeps", "OutcomeLike", "SubmitLimiter"]
