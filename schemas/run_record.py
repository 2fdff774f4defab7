"""RunRecord: one document per run in Firestore collection `runs`, keyed by run id. States only move forward."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from schemas.errors import SchemaError
from schemas.fields import Reader

SCHEMA_VERSION = 1


class RunState(StrEnum):
    RECEIVED = "RECEIVED"
    PLANNED = "PLANNED"
    SUBMITTING = "SUBMITTING"
    SUBMITTED = "SUBMITTED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    REJECTED = "REJECTED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED, RunState.REJECTED})

# Which states may follow which. Job events can skip RUNNING (a short job) or arrive before the dispatcher has
# recorded SUBMITTED, so the job-driven states are reachable from SUBMITTING too.
ALLOWED_TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    RunState.RECEIVED: frozenset({RunState.PLANNED, RunState.REJECTED, RunState.FAILED}),
    RunState.PLANNED: frozenset({RunState.SUBMITTING, RunState.REJECTED, RunState.FAILED}),
    RunState.SUBMITTING: frozenset({RunState.SUBMITTED, RunState.RUNNING, RunState.SUCCEEDED, RunState.FAILED,
                                    RunState.CANCELLED}),
    RunState.SUBMITTED: frozenset({RunState.RUNNING, RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED}),
    RunState.RUNNING: frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED}),
    RunState.SUCCEEDED: frozenset(),
    RunState.FAILED: frozenset(),
    RunState.CANCELLED: frozenset(),
    RunState.REJECTED: frozenset(),
}


def can_move(current: RunState, new: RunState) -> bool:
    return new in ALLOWED_TRANSITIONS[current]


def parse_state(value: object, field_name: str = "state") -> RunState:
    try:
        return RunState(str(value))
    except ValueError as exc:
        raise SchemaError(f"{value!r} is not a run state; expected one of {', '.join(RunState)}",
                          field=field_name) from exc


@dataclass(frozen=True)
class StateChange:
    state: str
    at: str
    """RFC 3339 time the change was recorded."""
    detail: str = ""


@dataclass(frozen=True)
class VertexJobRef:
    job_name: str
    """projects/{p}/locations/{region}/customJobs/{id}."""
    job_id: str
    region: str
    display_name: str = ""
    state: str = ""
    """The Vertex JobState name last read, e.g. JOB_STATE_RUNNING."""


@dataclass(frozen=True)
class Artifacts:
    output_dir: str
    """gs:// base_output_directory of the job."""
    model_dir: str
    checkpoint_dir: str
    tensorboard_dir: str


@dataclass(frozen=True)
class RunError:
    code: str
    """A short machine-readable reason: invalid-request, infeasible, submit-failed, job-failed, ..."""
    message: str


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    state: str
    request: dict[str, Any]
    """The TrainingRequest (canonical dict), or the raw fields that could be read for a REJECTED one."""
    created_at: str
    updated_at: str
    history: tuple[StateChange, ...] = ()
    plan: dict[str, Any] | None = None
    vertex: VertexJobRef | None = None
    artifacts: Artifacts | None = None
    metrics: dict[str, Any] | None = None
    error: RunError | None = None
    timings: dict[str, Any] = field(default_factory=dict)
    """created_at, submitted_at, started_at, ended_at (RFC 3339) and run_seconds, as they become known."""
    cost: dict[str, Any] = field(default_factory=dict)
    """estimated_usd (from the plan) and, once ended, actual_usd = run hours x the plan's hourly cost."""
    submission: dict[str, Any] = field(default_factory=dict)
    """The dispatcher's claim (owner, lease_until) and every CreateCustomJob attempt with its outcome."""
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["history"] = [asdict(h) for h in self.history]
        return data

    @property
    def run_state(self) -> RunState:
        return parse_state(self.state)


def parse_run_record(data: dict[str, Any]) -> RunRecord:
    """Read a stored run document; raises SchemaError naming the field that does not fit."""
    r = Reader(data, "run")
    parse_state(r.string("state"), "run.state")
    vertex = r.optional_obj("vertex")
    artifacts = r.optional_obj("artifacts")
    error = r.optional_obj("error")
    return RunRecord(
        run_id=r.string("run_id"),
        state=r.string("state"),
        request=dict(r.obj("request").data),
        created_at=r.string("created_at"),
        updated_at=r.string("updated_at"),
        history=tuple(
            StateChange(**{k: str(v) for k, v in Reader(h, "run.history[]").data.items()})
            for h in data.get("history", [])
        ),
        plan=data.get("plan"),
        vertex=None if vertex is None else VertexJobRef(
            job_name=vertex.string("job_name"), job_id=vertex.string("job_id"), region=vertex.string("region"),
            display_name=vertex.string("display_name", ""), state=vertex.string("state", "")),
        artifacts=None if artifacts is None else Artifacts(
            output_dir=artifacts.string("output_dir"), model_dir=artifacts.string("model_dir"),
            checkpoint_dir=artifacts.string("checkpoint_dir"), tensorboard_dir=artifacts.string("tensorboard_dir")),
        metrics=data.get("metrics"),
        error=None if error is None else RunError(code=error.string("code"), message=error.string("message")),
        timings=dict(data.get("timings") or {}),
        cost=dict(data.get("cost") or {}),
        submission=dict(data.get("submission") or {}),
        schema_version=r.integer("schema_version", SCHEMA_VERSION),
    )
