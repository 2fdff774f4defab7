"""CapacityEvent: what one Vertex job of a run, or one CreateCustomJob call refused for capacity, met. One document
per event in the Firestore collection `capacity_events` (topology firestore.capacity_events_collection), keyed by
`event_id`: the job's id, or a digest of the refused attempt, so a repeated delivery writes the same document again.

The listener (and the reconciler, through the same rule) writes one when a run's job ends: its machines, its sale
mode, how long they ran, and how it ended (`outcome`: succeeded, or the failure reason, e.g. preempted, stockout,
timeout). The dispatcher writes one when Vertex refuses a plan for capacity at the call (`kind` refused). The
dispatcher reads the newest CAPACITY_EVENTS_READ and the planner prices Spot's preemptions and each shape's refusals
from them (functions/planning/risk.py, docs/planning.md "Capacity risk").

Written as `CapacityEvent.to_document()`, read with `parse_capacity_event`; `schemas/examples/capacity_event.json`.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any

from schemas.errors import SchemaError
from schemas.fields import Reader
from schemas.vocabulary import CONSUMPTION_MODES, FAILURE_REASONS, PREEMPTED, QUOTA, STOCKOUT

SCHEMA_VERSION = 1
KINDS = ("job", "refused")
"""A job that ended (it was created: a try), or a CreateCustomJob call Vertex refused for capacity (a try refused)."""
SUCCEEDED = "succeeded"
OUTCOMES = (SUCCEEDED, *FAILURE_REASONS)
"""How an event ended: a job that succeeded, else its failure reason (schemas/vocabulary.py FAILURE_REASONS)."""
REFUSALS = (STOCKOUT, QUOTA)
"""Outcomes that are a refusal for capacity: no machines of the shape, or no quota for them."""
CAPACITY_EVENTS_READ = 500
"""The most events the dispatcher reads to plan (one query, newest first: what the machines met lately)."""
MAX_RUNNING_HOURS = 24.0 * 7
"""A job runs at most Vertex's 7-day timeout: a longer running time is a clock error, not exposure."""


@dataclass(frozen=True)
class CapacityEvent:
    event_id: str
    kind: str
    """One of KINDS."""
    region: str
    machine_type: str
    accelerator_type: str
    """"" on a CPU-only machine."""
    mode: str
    """The sale mode (schemas/vocabulary.py CONSUMPTION_MODES): on_demand, spot, flex_start, reservation."""
    nodes: int
    outcome: str
    """One of OUTCOMES."""
    at: str
    """RFC 3339: when it ended (the job's end, or the refusal)."""
    run_id: str = ""
    lost_seconds: float = 0.0
    """For a refusal after Vertex accepted the job: from its creation to its end (the time the refusal cost)."""
    running_hours: float = 0.0
    """From the job's start to its end: how long each of its machines ran (0 when it never started)."""
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        problems = []
        if self.kind not in KINDS:
            problems.append(f"kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.mode not in CONSUMPTION_MODES:
            problems.append(f"mode {self.mode!r} is not one of {', '.join(CONSUMPTION_MODES)}")
        if self.outcome not in OUTCOMES:
            problems.append(f"outcome {self.outcome!r} is not one of {', '.join(OUTCOMES)}")
        if self.kind == "refused" and self.outcome not in REFUSALS:
            problems.append(f"a refused call's outcome must be one of {', '.join(REFUSALS)}, got {self.outcome!r}")
        if self.nodes < 1:
            problems.append(f"nodes must be >= 1, got {self.nodes}")
        if not 0 <= self.running_hours <= MAX_RUNNING_HOURS:
            problems.append(f"running_hours must be in [0, {MAX_RUNNING_HOURS:g}], got {self.running_hours}")
        if not 0 <= self.lost_seconds <= MAX_RUNNING_HOURS * 3600:
            problems.append(f"lost_seconds must be in [0, {MAX_RUNNING_HOURS * 3600:g}], got {self.lost_seconds}")
        if not self.event_id or not self.region or not self.machine_type:
            problems.append("event_id, region and machine_type must be set")
        if problems:
            raise SchemaError(f"capacity event {self.event_id!r}: {'; '.join(problems)}", field="capacity_event")

    @property
    def refused(self) -> bool:
        """Refused for capacity: at the call, or after Vertex accepted the job."""
        return self.outcome in REFUSALS

    @property
    def preempted(self) -> bool:
        return self.outcome == PREEMPTED

    def to_document(self) -> dict[str, Any]:
        return asdict(self)


def job_event_id(job_name: str) -> str:
    """The event of one job: its id (the last part of projects/P/locations/R/customJobs/ID)."""
    return "job-" + job_name.rsplit("/", 1)[-1][:200]


def refused_event_id(run_id: str, attempted_at: str, region: str, machine_type: str) -> str:
    """The event of one refused call: a digest of the run, the attempt's recorded time and its shape (a redelivery
    that replays the same attempt writes the same document)."""
    text = "\0".join((run_id, attempted_at, region, machine_type))
    return "refused-" + hashlib.sha256(text.encode()).hexdigest()[:24]


def parse_capacity_event(data: object) -> CapacityEvent:
    """Read a stored capacity event; raises SchemaError naming the field that does not fit."""
    r = Reader(data, "capacity_event")
    return CapacityEvent(
        event_id=r.string("event_id", max_len=256),
        kind=r.string("kind", choices=KINDS),
        region=r.string("region", max_len=64),
        machine_type=r.string("machine_type", max_len=64),
        accelerator_type=r.string("accelerator_type", "", max_len=64),
        mode=r.string("mode", choices=CONSUMPTION_MODES),
        nodes=r.integer("nodes", minimum=1),
        outcome=r.string("outcome", choices=OUTCOMES),
        at=r.string("at", max_len=64),
        run_id=r.string("run_id", "", max_len=200),
        lost_seconds=r.number("lost_seconds", 0.0, minimum=0),
        running_hours=r.number("running_hours", 0.0, minimum=0),
        schema_version=r.integer("schema_version", SCHEMA_VERSION),
    )
