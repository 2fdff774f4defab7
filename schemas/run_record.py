"""RunRecord: one document per run in Firestore collection `runs`, keyed by run id. States only move forward.

The document is written only as `RunRecord.to_document()` (a new run from `new_run`) and read only with
`parse_run_record`; `parse_run_record(doc).to_document() == doc` for every document Landfall writes. In the record
times are RFC 3339 text in the schemas.times format (as `to_dict()`, the JSON form of the golden example and of
`landfall run --json`, shows them); in the stored document the times of TIME_FIELDS are Firestore timestamps, so a
query by time range compares times, not text. The parser also reads the RFC 3339 strings older documents hold.
Optional parts absent from the document (a timing not known yet, a submission
not planned yet) are None in the record and left out of the document, so the stored shape is what the CLI and
users read: e.g. `submission` is `{}` until the run is planned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from schemas.canary import CanaryRecord, parse_canary_record
from schemas.code_version import CodeObject, parse_code_objects
from schemas.data_objects import DataRead, parse_data_read
from schemas.errors import SchemaError
from schemas.fields import Reader
from schemas.model_version import ModelVersionRef, parse_model_version
from schemas.plain import as_dict
from schemas.plan import Plan, parse_plan
from schemas.record_bounds import CANCEL_BY_KEPT, TEXT_KEPT, WARNING_TEXT, WARNINGS_KEPT, cut
from schemas.team_ledger import RunCharge, parse_run_charge
from schemas.times import format_timestamp, parse_timestamp
from schemas.vocabulary import QUEUE_REASONS, TIMEOUT_EXTENDED

SCHEMA_VERSION = 1


class RunState(StrEnum):
    RECEIVED = "RECEIVED"
    PLANNED = "PLANNED"
    SUBMITTING = "SUBMITTING"
    SUBMITTED = "SUBMITTED"
    WAITING = "WAITING"
    """Every plan was refused for capacity: the reconciler submits again at submission.waiting.retry_at."""
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
#
# Attempts: a run may have several jobs, one per attempt. Within one attempt the states only move forward
# (SUBMITTING -> SUBMITTED -> RUNNING -> an end). A job that fails for capacity after it was accepted starts the
# next attempt: SUBMITTED or RUNNING -> SUBMITTING (history detail "attempt N: ..."), or WAITING when no plan is
# left; WAITING -> SUBMITTING starts the next round. Those are the only moves back, each only through
# functions/records/attempts.py, which records the ended job on submission.jobs first; the listener ignores events
# of a job that is no longer the run's current one, so a late event cannot move an attempt back.
_ENDS = (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED)
ALLOWED_TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    RunState.RECEIVED: frozenset({RunState.PLANNED, RunState.REJECTED, RunState.FAILED, RunState.CANCELLED}),
    RunState.PLANNED: frozenset({RunState.SUBMITTING, RunState.REJECTED, RunState.FAILED, RunState.CANCELLED}),
    RunState.SUBMITTING: frozenset({RunState.SUBMITTED, RunState.RUNNING, RunState.WAITING, *_ENDS}),
    RunState.SUBMITTED: frozenset({RunState.RUNNING, RunState.SUBMITTING, RunState.WAITING, *_ENDS}),
    RunState.RUNNING: frozenset({RunState.SUBMITTING, RunState.WAITING, *_ENDS}),
    RunState.WAITING: frozenset({RunState.SUBMITTING, RunState.FAILED, RunState.CANCELLED}),
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
        raise SchemaError(
            f"{value!r} is not a run state; expected one of {', '.join(RunState)}", field=field_name
        ) from exc


_TEXT = 1 << 20
"""The longest free text (details, error messages, attempt outcomes) the parser reads. Landfall writes less: a
refusal's or job's message is cut at schemas/record_bounds.py TEXT_KEPT; older documents may hold more."""


TIME_FIELDS = (
    "created_at",
    "updated_at",
    "history[].at",
    "timings.created_at",
    "timings.submitted_at",
    "timings.started_at",
    "timings.ended_at",
    "submission.lease_until",
    "submission.attempts[].at",
    "submission.results_lease_until",
    "submission.model_lease_until",
    "model.registered_at",
    "model.promotion.at",
)
"""The document's times (dotted paths; `[]` is every entry of a list): Firestore timestamps when stored."""


def _convert_times(doc: dict[str, Any], convert: Callable[[Any], Any]) -> dict[str, Any]:
    """A copy of `doc` with `convert` applied to the values at TIME_FIELDS. Parts without the expected shape are
    left as they are, for the parser to reject with the field's name."""

    def at(node: Any, path: list[str]) -> Any:
        if not path:
            return convert(node)
        head, rest = path[0], path[1:]
        if head.endswith("[]") and isinstance(node, dict) and isinstance(node.get(head[:-2]), list):
            return {**node, head[:-2]: [at(item, rest) for item in node[head[:-2]]]}
        if isinstance(node, dict) and node.get(head) is not None:
            return {**node, head: at(node[head], rest)}
        return node

    for name in TIME_FIELDS:
        doc = at(doc, name.split("."))
    return doc


def _as_timestamp(value: Any) -> Any:
    return parse_timestamp(value) if isinstance(value, str) and value else value


def _as_text(value: Any) -> Any:
    return format_timestamp(value) if isinstance(value, datetime) and value.tzinfo is not None else value


def _present(data: dict[str, Any]) -> dict[str, Any]:
    """The fields that are set: None means absent from the stored document."""
    return {k: v for k, v in data.items() if v is not None}


@dataclass(frozen=True)
class StateChange:
    state: RunState
    at: str
    """RFC 3339 time the change was recorded."""
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state.value, "at": self.at, "detail": self.detail}


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
    """A short machine-readable reason: invalid-request, infeasible, submit-refused, no-capacity, job-failed, ..."""
    message: str
    """Why, for a person: for a failed job the trainer's own error line when it left one, else Vertex's message."""
    kind: str | None = None
    """For a failed job: the trainer's error kind (DataError, ConfigError, OutOfMemory, ..., or the exception type
    of a crash), from its failure record (schemas/trainer_failure.py)."""
    step: int | None = None
    """For a failed job: the training step the trainer had reached, when it had started training."""
    job_message: str | None = None
    """For a failed job: Vertex's own error message (e.g. "The replica workerpool0-0 exited with a non-zero status
    of 3..."), kept beside the trainer's."""
    reason: str | None = None
    """For an ended job: one of schemas/vocabulary.py FAILURE_REASONS (bad-data, stockout, ...)."""
    replica: str | None = None
    """The replica Vertex names as the one that failed (workerpool0-0)."""
    exit_code: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return _present(as_dict(self))


@dataclass(frozen=True)
class Timings:
    """When things happened, as they become known (RFC 3339); None: not known yet (absent from the document)."""

    created_at: str | None = None
    submitted_at: str | None = None
    started_at: str | None = None
    """The job's start time as Vertex reports it."""
    ended_at: str | None = None
    run_seconds: float | None = None
    """ended_at - started_at, once both are known."""
    estimated_seconds: float | None = None
    """The plan's estimated duration (estimated_hours x 3600), kept beside run_seconds once the run has ended."""

    def to_dict(self) -> dict[str, Any]:
        return _present(as_dict(self))

    def next_job(self) -> Timings:
        """These timings once the current job is over and its cost moved to Cost.earlier_usd: the next job's start
        and end are its own (none yet), so its running time is not counted twice."""
        return replace(self, started_at=None, ended_at=None, run_seconds=None)


@dataclass(frozen=True)
class Cost:
    estimated_usd: float | None = None
    """The plan's estimate, recorded when the run is planned."""
    actual_usd: float | None = None
    """Once ended: run hours x the plan's hourly cost."""
    actual_basis: str | None = None
    """How actual_usd was worked out."""
    earlier_usd: float | None = None
    """What the run's earlier jobs cost (its canary, a job that ended for capacity after it ran): each one's running
    time x its plan's hourly cost, counted into actual_usd and, while the run runs, against its team's month."""

    def to_dict(self) -> dict[str, Any]:
        return _present(as_dict(self))

    def with_earlier(self, usd: float) -> Cost:
        """This cost with an earlier job's spend added (nothing for a job that never ran)."""
        if usd <= 0:
            return self
        return replace(self, earlier_usd=round((self.earlier_usd or 0.0) + usd, 6))


class AttemptKind(StrEnum):
    """What came of one CreateCustomJob attempt (SubmissionAttempt.result)."""

    PENDING = "pending"
    """Recorded before the call; not known since: the call may have created a job."""
    CREATED = "created"
    CREATED_CANARY = "created canary"
    CAPACITY = "capacity"
    """Vertex refused it for capacity: no job exists."""
    RATE_LIMITED = "rate-limited"
    """Vertex refused it for a per-minute request quota: no job exists."""
    REFUSED = "refused"
    """Vertex refused it for good (the run FAILED)."""
    NOT_ADMITTED = "not admitted"
    """The run's team's limits refused the plan before any call (a cap on its GPU kind, the limit per run, the
    month's budget): no job exists; the run goes on to its next plan."""
    OTHER = "other"
    """Text no Landfall writes (a hand edit): read, never written by this name."""

    @property
    def refused_by_vertex(self) -> bool:
        """No job exists for such an attempt (Vertex refused the call)."""
        return self in (AttemptKind.CAPACITY, AttemptKind.RATE_LIMITED)

    @property
    def made_no_job(self) -> bool:
        """No job exists for such an attempt: Vertex refused the call, or the team's limits kept it from being made."""
        return self.refused_by_vertex or self == AttemptKind.NOT_ADMITTED


@dataclass(frozen=True)
class AttemptOutcome:
    """A SubmissionAttempt's outcome as a term: its kind and the detail Vertex gave (the error's text, cut). Stored as
    `text`: the kind alone, or "kind: detail" (the form every stored attempt has, read back by `read`)."""

    kind: AttemptKind
    detail: str = ""

    @property
    def text(self) -> str:
        if self.kind == AttemptKind.OTHER:
            return self.detail
        return f"{self.kind.value}: {self.detail}" if self.kind in _DETAILED else self.kind.value

    @staticmethod
    def read(text: str) -> AttemptOutcome:
        """The term a stored outcome's text stands for (text no kind names reads as OTHER, its text the detail)."""
        if text in _ATTEMPT_KINDS:
            return AttemptOutcome(_ATTEMPT_KINDS[text])
        head, sep, detail = text.partition(": ")
        kind = _ATTEMPT_KINDS.get(head) if sep else None
        return AttemptOutcome(kind, detail) if kind is not None else AttemptOutcome(AttemptKind.OTHER, text)


_ATTEMPT_KINDS = {k.value: k for k in AttemptKind if k != AttemptKind.OTHER}
_DETAILED = (AttemptKind.CAPACITY, AttemptKind.RATE_LIMITED, AttemptKind.REFUSED, AttemptKind.NOT_ADMITTED)
"""Kinds whose text always carries the detail, after ": " (Vertex's error message, the team limit's)."""


@dataclass(frozen=True)
class SubmissionAttempt:
    """One CreateCustomJob call, recorded before it is made."""

    region: str
    machine_type: str
    at: str
    outcome: str
    """The stored text of its AttemptOutcome (`result`): "pending" (not known: the call may have created a job),
    "created", "created canary", "capacity: ...", "rate-limited: ...", "refused: ..." or "not admitted: ..."."""
    plan: Plan
    round: int | None = None
    """The round of plans it belonged to (absent from attempts recorded before rounds were noted on them)."""
    resumed_from_step: int | None = None
    """The step of the checkpoint the job it created resumed training from, as its metrics said (0: it started
    fresh); None until its metrics are recorded, or when they do not say."""
    reason: str | None = None
    """Why the attempt was made beyond the run's plans in order: TIMEOUT_EXTENDED (schemas/vocabulary.py) when its job
    continues one that reached its timeout while training advanced; None otherwise."""

    @property
    def result(self) -> AttemptOutcome:
        """The outcome as a term (its kind and detail)."""
        return AttemptOutcome.read(self.outcome)

    def ended(self, result: AttemptOutcome) -> SubmissionAttempt:
        """This attempt with its outcome known."""
        return replace(self, outcome=result.text)

    def to_dict(self) -> dict[str, Any]:
        return {
            "region": self.region,
            "machine_type": self.machine_type,
            "at": self.at,
            "outcome": self.outcome,
            "plan": self.plan.to_dict(),
            **_present({"round": self.round, "resumed_from_step": self.resumed_from_step, "reason": self.reason}),
        }


@dataclass(frozen=True)
class JobAttempt:
    """A job of this run that ended for capacity, so the run went on to another attempt."""

    job_name: str
    region: str
    machine_type: str
    reason: str
    """The error class (schemas/vocabulary.py FAILURE_REASONS), e.g. stockout."""
    message: str
    at: str
    round: int = 0
    """Which round of plans it belonged to (a new round starts each time the run leaves WAITING)."""
    accelerator_type: str | None = None
    """The GPU its plan had ("" none); None in jobs recorded before it was kept (matched by machine type alone)."""

    def to_dict(self) -> dict[str, Any]:
        return _present(as_dict(self))


@dataclass(frozen=True)
class TimeoutExtension:
    """The run's latest job reached its scheduling timeout while its training advanced: the next job, on the same
    machine shape, goes on from the newest checkpoint with this timeout (functions/records/continuation.py)."""

    number: int
    """Extensions of this run so far (1 for the first; LANDFALL_TIMEOUT_EXTENSIONS bounds them)."""
    job_name: str
    """The job that reached its timeout."""
    region: str
    machine_type: str
    """The shape the timeout was measured on, and is given to."""
    timeout_seconds: int
    """The next job's scheduling.timeout on that shape."""
    from_step: int
    """The newest committed checkpoint's step: where the next job resumes."""
    steps_per_second: float
    """The training rate the timed-out job showed (its committed checkpoints over its running time)."""
    spent_usd: float
    """What the run's timed-out jobs cost in all (their running time x the plan's hourly cost): the budget left is
    the request's constraints.budget_usd less this."""
    at: str
    basis: str
    """The arithmetic, for people."""

    def to_dict(self) -> dict[str, Any]:
        return as_dict(self)


@dataclass(frozen=True)
class Waiting:
    """Why a run waits and until when."""

    reason: str
    retry_at: str
    since: str
    """When the run first waited (the give-up time counts from it)."""
    tries: int = 1
    note: str | None = None
    """What the reconciler saw of a job that waits long (queued, pending provisioning)."""

    def to_dict(self) -> dict[str, Any]:
        return _present(as_dict(self))


@dataclass(frozen=True)
class Queued:
    """Why the run's CreateCustomJob is held back by a rate limit (not capacity), on the same plan: it stays SUBMITTING
    and is tried again at retry_at. Kept after the job is created, with over_at set, so the run still says it was
    queued and for how long."""

    reason: str
    """One of QUEUE_REASONS (schemas/vocabulary.py): submit-rate (Landfall's own limiter) or vertex-rate-limit."""
    region: str
    """The region whose limit held the submission back."""
    since: str
    """RFC 3339: when the submission was first held back."""
    retry_at: str
    """RFC 3339: the earliest the submission is tried again (the end of the submission lease until then)."""
    tries: int = 1
    """How many times it has been held back so far."""
    message: str = ""
    """For a person: the limit, or Vertex's answer with its quota metric."""
    reserved: bool = False
    """submit-rate: the run holds the limiter's slot at retry_at, so its next try calls without asking again; set
    False in the write that records that call's attempt."""
    over_at: str | None = None
    """RFC 3339: when the job was created at last; None while the run is queued."""

    def to_dict(self) -> dict[str, Any]:
        return _present({**as_dict(self), "reserved": self.reserved or None})


@dataclass(frozen=True)
class Refusals:
    """What every round of a long wait for capacity was refused, counted: kept for the whole run, while only the
    last attempts and jobs are kept in full (schemas/record_bounds.py). Absent until a round ends in WAITING."""

    rounds: int
    """Rounds of plans that ended with every plan refused (the run then waited)."""
    refused: int
    """Refusals in all: CreateCustomJob attempts refused for capacity, and jobs that ended for capacity."""
    first_at: str
    """RFC 3339 text, also in the stored document (a summary for people: no query compares it)."""
    first: str
    """The first refusal, as its attempt or job recorded it."""
    last_at: str
    last: str
    by_reason: dict[str, int] = field(default_factory=dict)
    """Refusals counted by reason (e.g. "capacity: quota exhausted", "job: stockout")."""
    attempts_omitted: int = 0
    """Attempts left out of `submission.attempts` (the first and the last ones are kept)."""
    jobs_omitted: int = 0
    """Jobs left out of `submission.jobs` (the last ones are kept)."""

    def to_dict(self) -> dict[str, Any]:
        return {**as_dict(self), "by_reason": dict(self.by_reason)}


def _refusals(r: Reader | None) -> Refusals | None:
    if r is None:
        return None
    counts = r.obj("by_reason")
    return Refusals(
        rounds=r.integer("rounds", minimum=0),
        refused=r.integer("refused", minimum=0),
        first_at=r.string("first_at", max_len=64),
        first=r.string("first", max_len=_TEXT),
        last_at=r.string("last_at", max_len=64),
        last=r.string("last", max_len=_TEXT),
        by_reason={str(k): counts.integer(str(k), minimum=0) for k in counts.data},
        attempts_omitted=r.integer("attempts_omitted", 0, minimum=0),
        jobs_omitted=r.integer("jobs_omitted", 0, minimum=0),
    )


@dataclass(frozen=True)
class LongWait:
    """Why the run's job has not started: noted by the reconciler once the job has been QUEUED or PENDING longer
    than LANDFALL_LONG_WAIT_SECONDS, rewritten only when what it says changes, and closed (`over_at`) when the job
    starts or ends. It is absent from the document until a job waits that long (older documents have none)."""

    job_name: str
    """The job that waits (a later attempt's job gets a note of its own)."""
    job_state: str
    """The Vertex JobState name seen: JOB_STATE_QUEUED or JOB_STATE_PENDING."""
    reason: str
    """For a person: queued (not admitted yet) or pending provisioning (machines being found), with the shape."""
    since: str
    """RFC 3339: when the job was created (the wait is counted from it)."""
    noted_at: str
    """RFC 3339: when the reconciler wrote this note."""
    over_at: str | None = None
    """RFC 3339: when the job stopped waiting (its start time, or when it was seen ended); None while it waits."""

    def to_dict(self) -> dict[str, Any]:
        return _present(as_dict(self))


@dataclass(frozen=True)
class ReconcileErrors:
    """Reconcile passes in a row that could not reconcile the run (functions/reconciler/handler.py), marked by the
    pass itself as one field update (a run whose document cannot be read is marked too); removed when a pass
    reconciles the run again. Absent from the document otherwise."""

    count: int
    """Passes in a row that failed on this run."""
    last_error: str
    """The last one's error, its type first, cut at TEXT_KEPT characters (schemas/record_bounds.py)."""
    first_seen: str
    """RFC 3339: when the first of these passes failed."""
    last_seen: str
    """RFC 3339: when the last one did."""

    def to_dict(self) -> dict[str, Any]:
        return as_dict(self)


def reconcile_errors_after(before: ReconcileErrors | None, error: str, at: str) -> ReconcileErrors:
    """The mark after one more failed pass at `at` (before: the mark stored so far, None when there is none)."""
    text = cut(error, TEXT_KEPT)
    if before is None:
        return ReconcileErrors(count=1, last_error=text, first_seen=at, last_seen=at)
    return replace(before, count=before.count + 1, last_error=text, last_seen=at)


def parse_reconcile_errors(data: object) -> ReconcileErrors:
    e = Reader(data, "run.reconcile_errors")
    return ReconcileErrors(
        count=e.integer("count", minimum=1),
        last_error=e.string("last_error", max_len=len(cut("x" * (TEXT_KEPT + 1), TEXT_KEPT)) + 20),
        first_seen=e.string("first_seen", max_len=64),
        last_seen=e.string("last_seen", max_len=64),
    )


def _long_wait(w: Reader | None) -> LongWait | None:
    if w is None:
        return None
    return LongWait(
        job_name=w.string("job_name", max_len=400),
        job_state=w.string("job_state"),
        reason=w.string("reason", max_len=_TEXT),
        since=w.string("since", max_len=64),
        noted_at=w.string("noted_at", max_len=64),
        over_at=None if w.data.get("over_at") is None else w.string("over_at", max_len=64),
    )


@dataclass(frozen=True)
class CancelRequest:
    by: str
    at: str

    def to_dict(self) -> dict[str, Any]:
        return as_dict(self)


@dataclass(frozen=True)
class Submission:
    """The dispatcher's claim on submitting the run's job, and its attempts: the first and the last ones in full,
    every refusal counted in `refusals` (schemas/record_bounds.py). All absent until the run is planned."""

    owner: str | None = None
    """The delivery holding the submission lease."""
    lease_until: str | None = None
    """RFC 3339 end of that lease (functions/records/leases.py); set to the present when given back."""
    fallbacks: tuple[Plan, ...] | None = None
    """The next-best plans, tried in order when a region refuses the plan for capacity."""
    attempts: tuple[SubmissionAttempt, ...] | None = None
    """The first CreateCustomJob attempt and the last ATTEMPTS_KEPT, oldest first."""
    jobs: tuple[JobAttempt, ...] | None = None
    """The last JOBS_KEPT jobs of earlier attempts that ended for capacity, oldest first."""
    job_ids: tuple[str, ...] | None = None
    """The numeric ids of those jobs (the listener finds a run by an earlier job's id with array-contains)."""
    round: int | None = None
    """The current round of plans (None = 0)."""
    waiting: Waiting | None = None
    refusals: Refusals | None = None
    """Every refusal of the run's rounds, counted (absent until a round ends in WAITING)."""
    cancel: CancelRequest | None = None
    """Who asked to cancel the run, and when."""
    results_published: bool | None = None
    """The RunFinished message was published (the results outbox flag)."""
    results_lease_until: str | None = None
    """RFC 3339 end of the lease of the delivery publishing RunFinished (functions/records/results.py): two
    deliveries that see a run end at once publish it once."""
    model_lease_until: str | None = None
    """RFC 3339 end of the lease of the delivery registering the run's model in Vertex AI Model Registry
    (functions/records/model_registration.py): deliveries that see a run succeed at once upload its model once."""
    model_slot_at: str | None = None
    """RFC 3339 time of the region's submission-limiter slot the run's UploadModel holds, taken by a registration
    that found its slot too far off to wait for; the registration after it uploads then without taking another."""
    queued: Queued | None = None
    """Set while (and after) a rate limit held the submission back on its plan; absent when none ever did."""
    extension: TimeoutExtension | None = None
    """The latest timeout extension (a job that reached its timeout while training advanced); absent when none."""

    def to_dict(self) -> dict[str, Any]:
        return _present(
            {
                "owner": self.owner,
                "lease_until": self.lease_until,
                "fallbacks": None if self.fallbacks is None else [p.to_dict() for p in self.fallbacks],
                "attempts": None if self.attempts is None else [a.to_dict() for a in self.attempts],
                "jobs": None if self.jobs is None else [j.to_dict() for j in self.jobs],
                "job_ids": None if self.job_ids is None else list(self.job_ids),
                "round": self.round,
                "waiting": None if self.waiting is None else self.waiting.to_dict(),
                "refusals": None if self.refusals is None else self.refusals.to_dict(),
                "cancel": None if self.cancel is None else self.cancel.to_dict(),
                "results_published": self.results_published,
                "results_lease_until": self.results_lease_until,
                "model_lease_until": self.model_lease_until,
                "model_slot_at": self.model_slot_at,
                "queued": None if self.queued is None else self.queued.to_dict(),
                "extension": None if self.extension is None else self.extension.to_dict(),
            }
        )


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    state: RunState
    request: dict[str, Any]
    """The TrainingRequest (canonical dict), or the raw fields that could be read for a REJECTED one."""
    created_at: str
    updated_at: str
    history: tuple[StateChange, ...] = ()
    history_omitted: int | None = None
    """History entries left out between the first and the last ones kept (schemas/record_bounds.py); absent when
    none was."""
    plan: Plan | None = None
    vertex: VertexJobRef | None = None
    long_wait: LongWait | None = None
    """Why the current job has not started yet, once it has waited long (absent from the document until then)."""
    artifacts: Artifacts | None = None
    metrics: dict[str, Any] | None = None
    """The trainer's metrics.json, once the job succeeded."""
    error: RunError | None = None
    timings: Timings = field(default_factory=Timings)
    cost: Cost = field(default_factory=Cost)
    submission: Submission = field(default_factory=Submission)
    schema_version: int = SCHEMA_VERSION
    # Retries (`landfall retry`): both runs name each other. Absent from the document when None.
    retry_of: str | None = None
    """The FAILED or CANCELLED run whose request this run retries."""
    retried_by: str | None = None
    """The run that retries this one (set once, in a transaction: a second `landfall retry` names it)."""
    data_read: DataRead | None = None
    """What the trainer read (metrics.json `data`, once the job succeeded): the dataset version's objects, their
    count, bytes and digest. Absent from the document when None."""
    model: ModelVersionRef | None = None
    """The Vertex AI Model Registry version holding the run's model and its promotion decision (docs/models.md),
    once a SUCCEEDED run's model is registered. Absent from the document when None."""
    canary: CanaryRecord | None = None
    """The canary job run before the long job (schemas/canary.py, docs/canary.md); absent when the run had none."""
    team: RunCharge | None = None
    """The team the run counts against and what it holds in the team's ledger (schemas/team_ledger.py,
    docs/teams.md); absent when no team owns it (or there are no teams)."""
    warnings: tuple[str, ...] = ()
    """What Landfall left out of what the run's code or canary reported, and why (a figure out of its range, metrics
    cut to their bounds): at most WARNINGS_KEPT, each at most WARNING_TEXT characters (schemas/record_bounds.py;
    written through `warned`). Absent from the document when empty."""
    reconcile_errors: ReconcileErrors | None = None
    """Reconcile passes in a row that failed on this run (ReconcileErrors); absent while it reconciles."""
    code: tuple[CodeObject, ...] = ()
    """The exact version of each object of a team's code the run trains with (schemas/code_version.py), found when
    it was planned; its job fetches those generations. Absent from the document when empty (the built-in trainer, an
    image)."""

    def warned(self, notes: Iterable[str]) -> RunRecord:
        """The run with these warnings added (those it has already are not repeated), within the bounds the reader
        holds it to."""
        kept = list(self.warnings)
        for note in notes:
            text = cut(note, WARNING_TEXT).encode("utf-8", "backslashreplace").decode("utf-8")
            if text not in kept and len(kept) < WARNINGS_KEPT:
                kept.append(text)
        return self if len(kept) == len(self.warnings) else replace(self, warnings=tuple(kept))

    @property
    def run_state(self) -> RunState:
        return self.state

    def to_document(self) -> dict[str, Any]:
        """The document as stored in Firestore: to_dict() with the TIME_FIELDS as timestamps (aware datetimes)."""
        return _convert_times(self.to_dict(), _as_timestamp)

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON types, times as RFC 3339 text (the golden example's form)."""
        return {
            "schema_version": self.schema_version,
            "run_id": self.run_id,
            "state": self.state.value,
            "request": dict(self.request),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "history": [h.to_dict() for h in self.history],
            **_present({"history_omitted": self.history_omitted}),
            "plan": None if self.plan is None else self.plan.to_dict(),
            "vertex": None if self.vertex is None else as_dict(self.vertex),
            **({} if self.long_wait is None else {"long_wait": self.long_wait.to_dict()}),
            "artifacts": None if self.artifacts is None else as_dict(self.artifacts),
            "metrics": None if self.metrics is None else dict(self.metrics),
            "error": None if self.error is None else self.error.to_dict(),
            "timings": self.timings.to_dict(),
            "cost": self.cost.to_dict(),
            "submission": self.submission.to_dict(),
            **_present({"retry_of": self.retry_of, "retried_by": self.retried_by}),
            **({} if self.data_read is None else {"data_read": self.data_read.to_dict()}),
            **({} if self.model is None else {"model": self.model.to_dict()}),
            **({} if self.canary is None else {"canary": self.canary.to_dict()}),
            **({} if self.team is None else {"team": self.team.to_dict()}),
            **({"warnings": list(self.warnings)} if self.warnings else {}),
            **({} if self.reconcile_errors is None else {"reconcile_errors": self.reconcile_errors.to_dict()}),
            **({"code": [c.to_dict() for c in self.code]} if self.code else {}),
        }


def new_run(
    run_id: str,
    request: dict[str, Any],
    *,
    now: datetime,
    state: RunState = RunState.RECEIVED,
    detail: str = "",
    error: RunError | None = None,
) -> RunRecord:
    """The record of a run as first stored: one history entry, created now. A run stored already ended (a request
    REJECTED before it could be read) has its RunFinished still to publish, as every ended run does
    (`results_published` False: the reconciler's `unannounced` look finds it)."""
    stamp = format_timestamp(now)
    return RunRecord(
        run_id=run_id,
        state=state,
        request=request,
        created_at=stamp,
        updated_at=stamp,
        history=(StateChange(state, stamp, detail),),
        error=error,
        timings=Timings(created_at=stamp),
        submission=Submission(results_published=False) if state.terminal else Submission(),
    )


def _optional_string(r: Reader, key: str) -> str | None:
    return None if r.data.get(key) is None else r.string(key, max_len=64)


def _optional_number(r: Reader, key: str) -> float | None:
    return None if r.data.get(key) is None else r.number(key)


def _list(r: Reader, key: str) -> list[Any] | None:
    value = r.data.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise SchemaError(f"expected a list, got {type(value).__name__}", field=r._name(key))
    return value


def _history(r: Reader) -> tuple[StateChange, ...]:
    entries = []
    for i, item in enumerate(_list(r, "history") or []):
        h = Reader(item, f"run.history[{i}]")
        entries.append(
            StateChange(
                parse_state(h.string("state"), h._name("state")),
                h.string("at", max_len=64),
                h.string("detail", "", max_len=_TEXT),
            )
        )
    return tuple(entries)


class _Plans:
    """The plans of one run document, each distinct one read once. An attempt stores a copy of the plan it tried, as
    a rule the run's plan or one of its fallbacks: an equal dict (compared in C, far cheaper than reading its some
    140 values again) gets the Plan already read, which is frozen, so sharing it is safe."""

    def __init__(self) -> None:
        self._read: list[tuple[object, Plan]] = []

    def parse(self, data: object) -> Plan:
        for seen, plan in self._read:
            if seen == data:
                return plan
        plan = parse_plan(data)
        self._read.append((data, plan))
        return plan


def _attempt(a: Reader, plans: _Plans) -> SubmissionAttempt:
    return SubmissionAttempt(
        region=a.string("region"),
        machine_type=a.string("machine_type"),
        at=a.string("at", max_len=64),
        outcome=a.string("outcome", max_len=_TEXT),
        plan=plans.parse(a.data.get("plan")),
        round=None if a.data.get("round") is None else a.integer("round"),
        resumed_from_step=None
        if a.data.get("resumed_from_step") is None
        else a.integer("resumed_from_step", minimum=0),
        reason=None if a.data.get("reason") is None else a.string("reason", choices=(TIMEOUT_EXTENDED,)),
    )


def _submission(r: Reader | None, plans: _Plans) -> Submission:
    if r is None:
        return Submission()
    fallbacks = _list(r, "fallbacks")
    attempts = _list(r, "attempts")
    jobs = _list(r, "jobs")
    waiting = r.optional_obj("waiting")
    cancel = r.optional_obj("cancel")
    queued = r.optional_obj("queued")
    extension = r.optional_obj("extension")
    return Submission(
        owner=_optional_string(r, "owner"),
        lease_until=_optional_string(r, "lease_until"),
        fallbacks=None if fallbacks is None else tuple(plans.parse(p) for p in fallbacks),
        attempts=None
        if attempts is None
        else tuple(_attempt(Reader(a, f"{r.path}.attempts[{i}]"), plans) for i, a in enumerate(attempts)),
        jobs=None if jobs is None else tuple(_job(Reader(j, f"{r.path}.jobs[{i}]")) for i, j in enumerate(jobs)),
        job_ids=None if r.data.get("job_ids") is None else tuple(str(i) for i in _list(r, "job_ids") or ()),
        round=None if r.data.get("round") is None else r.integer("round", minimum=0),
        waiting=None
        if waiting is None
        else Waiting(
            reason=waiting.string("reason", max_len=_TEXT),
            retry_at=waiting.string("retry_at", max_len=64),
            since=waiting.string("since", max_len=64),
            tries=waiting.integer("tries", 1),
            note=None if waiting.data.get("note") is None else waiting.string("note", max_len=_TEXT),
        ),
        refusals=_refusals(r.optional_obj("refusals")),
        cancel=None
        if cancel is None
        else CancelRequest(by=cancel.string("by", max_len=CANCEL_BY_KEPT), at=cancel.string("at", max_len=64)),
        results_published=None if r.data.get("results_published") is None else bool(r.data["results_published"]),
        results_lease_until=_optional_string(r, "results_lease_until"),
        model_lease_until=_optional_string(r, "model_lease_until"),
        model_slot_at=_optional_string(r, "model_slot_at"),
        queued=None if queued is None else _queued(queued),
        extension=None if extension is None else _extension(extension),
    )


def _extension(e: Reader) -> TimeoutExtension:
    return TimeoutExtension(
        number=e.integer("number", minimum=1),
        job_name=e.string("job_name", max_len=400),
        region=e.string("region"),
        machine_type=e.string("machine_type"),
        timeout_seconds=e.integer("timeout_seconds", minimum=1),
        from_step=e.integer("from_step", minimum=0),
        steps_per_second=e.number("steps_per_second", minimum=0.0),
        spent_usd=e.number("spent_usd", minimum=0.0),
        at=e.string("at", max_len=64),
        basis=e.string("basis", "", max_len=_TEXT),
    )


def _queued(q: Reader) -> Queued:
    return Queued(
        reason=q.string("reason", choices=QUEUE_REASONS),
        region=q.string("region"),
        since=q.string("since", max_len=64),
        retry_at=q.string("retry_at", max_len=64),
        tries=q.integer("tries", 1, minimum=1),
        message=q.string("message", "", max_len=_TEXT),
        reserved=bool(q.data.get("reserved", False)),
        over_at=_optional_string(q, "over_at"),
    )


def _job(j: Reader) -> JobAttempt:
    return JobAttempt(
        job_name=j.string("job_name", max_len=400),
        region=j.string("region"),
        machine_type=j.string("machine_type"),
        reason=j.string("reason"),
        message=j.string("message", "", max_len=_TEXT),
        at=j.string("at", max_len=64),
        round=j.integer("round", 0),
        accelerator_type=_optional_string(j, "accelerator_type"),
    )


def parse_run_record(data: object) -> RunRecord:
    """Read a stored run document (times as timestamps or, as older documents and the JSON form hold them, RFC 3339
    text); raises SchemaError naming the field that does not fit."""
    r = Reader(_convert_times(data, _as_text) if isinstance(data, dict) else data, "run")
    vertex = r.optional_obj("vertex")
    artifacts = r.optional_obj("artifacts")
    error = r.optional_obj("error")
    plan = r.data.get("plan")
    metrics = r.optional_obj("metrics")
    timings = r.optional_obj("timings")
    cost = r.optional_obj("cost")
    data_read = r.optional_obj("data_read")
    model = r.optional_obj("model")
    plans = _Plans()
    return RunRecord(
        run_id=r.string("run_id"),
        state=parse_state(r.string("state"), "run.state"),
        request=dict(r.obj("request").data),
        created_at=r.string("created_at", max_len=64),
        updated_at=r.string("updated_at", max_len=64),
        history=_history(r),
        history_omitted=None if r.data.get("history_omitted") is None else r.integer("history_omitted", minimum=0),
        plan=None if plan is None else plans.parse(plan),
        vertex=None
        if vertex is None
        else VertexJobRef(
            job_name=vertex.string("job_name"),
            job_id=vertex.string("job_id"),
            region=vertex.string("region"),
            display_name=vertex.string("display_name", ""),
            state=vertex.string("state", ""),
        ),
        long_wait=_long_wait(r.optional_obj("long_wait")),
        artifacts=None
        if artifacts is None
        else Artifacts(
            output_dir=artifacts.string("output_dir"),
            model_dir=artifacts.string("model_dir"),
            checkpoint_dir=artifacts.string("checkpoint_dir"),
            tensorboard_dir=artifacts.string("tensorboard_dir"),
        ),
        metrics=None if metrics is None else dict(metrics.data),
        error=None
        if error is None
        else RunError(
            code=error.string("code"),
            message=error.string("message", max_len=_TEXT),
            kind=_optional_string(error, "kind"),
            step=None if error.data.get("step") is None else error.integer("step"),
            job_message=None if error.data.get("job_message") is None else error.string("job_message", max_len=_TEXT),
            reason=_optional_string(error, "reason"),
            replica=_optional_string(error, "replica"),
            exit_code=None if error.data.get("exit_code") is None else error.integer("exit_code"),
        ),
        timings=Timings()
        if timings is None
        else Timings(
            **{k: _optional_string(timings, k) for k in ("created_at", "submitted_at", "started_at", "ended_at")},
            run_seconds=_optional_number(timings, "run_seconds"),
            estimated_seconds=_optional_number(timings, "estimated_seconds"),
        ),
        cost=Cost()
        if cost is None
        else Cost(
            estimated_usd=_optional_number(cost, "estimated_usd"),
            actual_usd=_optional_number(cost, "actual_usd"),
            actual_basis=None if cost.data.get("actual_basis") is None else cost.string("actual_basis"),
            earlier_usd=_optional_number(cost, "earlier_usd"),
        ),
        submission=_submission(r.optional_obj("submission"), plans),
        schema_version=r.integer("schema_version", SCHEMA_VERSION),
        retry_of=_optional_string(r, "retry_of"),
        retried_by=_optional_string(r, "retried_by"),
        data_read=None if data_read is None else parse_data_read(data_read),
        model=None if model is None else parse_model_version(model),
        canary=None if r.data.get("canary") is None else parse_canary_record(r.data["canary"]),
        team=None if r.data.get("team") is None else parse_run_charge(r.data["team"]),
        warnings=_warnings(r),
        reconcile_errors=None
        if r.data.get("reconcile_errors") is None
        else parse_reconcile_errors(r.data["reconcile_errors"]),
        code=() if r.data.get("code") is None else parse_code_objects(r.data["code"]),
    )


def _warnings(r: Reader) -> tuple[str, ...]:
    listed = _list(r, "warnings") or []
    if len(listed) > WARNINGS_KEPT:
        raise SchemaError(f"holds {len(listed)} warnings; at most {WARNINGS_KEPT} are written", field="run.warnings")
    limit = len(cut("x" * (WARNING_TEXT + 1), WARNING_TEXT)) + 20  # cut() adds a note of the length it cut
    for i, text in enumerate(listed):
        if not isinstance(text, str) or len(text) > limit:
            raise SchemaError(
                f"expected text of at most {WARNING_TEXT} characters, got {text!r:.80}", field=f"run.warnings[{i}]"
            )
    return tuple(listed)


__all__ = [
    "ALLOWED_TRANSITIONS",
    "SCHEMA_VERSION",
    "TERMINAL_STATES",
    "Artifacts",
    "AttemptKind",
    "AttemptOutcome",
    "CancelRequest",
    "Cost",
    "JobAttempt",
    "LongWait",
    "ReconcileErrors",
    "Refusals",
    "RunError",
    "RunRecord",
    "RunState",
    "StateChange",
    "Submission",
    "SubmissionAttempt",
    "TimeoutExtension",
    "Timings",
    "VertexJobRef",
    "Waiting",
    "can_move",
    "new_run",
    "parse_reconcile_errors",
    "parse_run_record",
    "parse_state",
    "reconcile_errors_after",
]
