"""Run records for the dashboard's tests (landfall/ui/): a run that succeeded with per-epoch figures, one that failed
with the trainer's line, one whose canary ran and whose first plan ran out of capacity (a fallback), and many small
seeded runs; and a Source over a list of documents, for the unit tests."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from functions.records.team_ledger import TeamUse
from landfall.errors import CommandError
from landfall.ui.source import RunsQuery
from schemas.canary import CanaryFigures, CanaryRecord
from schemas.run_record import (
    Cost,
    JobAttempt,
    RunError,
    RunRecord,
    RunState,
    StateChange,
    Submission,
    SubmissionAttempt,
    Timings,
    new_run,
    parse_run_record,
)
from schemas.team_ledger import RunCharge
from schemas.times import format_timestamp
from tests.fakes.world import FALLBACK_1, NOW, PLAN

DATASET = "gs://landfall-landing/datasets/ui/"
TEAMS = ("vision", "speech", "ads", "search", "maps")
SEED_STATES = (RunState.SUCCEEDED, RunState.FAILED, RunState.RUNNING, RunState.WAITING, RunState.CANCELLED)


def _request(dataset: str = DATASET) -> dict[str, Any]:
    return {"dataset": {"uri": dataset, "object_count": 3, "total_bytes": 1200}, "task": "tabular-classification"}


def _at(minutes: float) -> str:
    return format_timestamp(NOW + timedelta(minutes=minutes))


def succeeded(run_id: str = "run-ui-succeeded") -> RunRecord:
    run = replace(new_run(run_id, _request(), now=NOW), team=RunCharge("vision"))
    epochs = [{"epoch": e, "loss": 1.0 / e, "accuracy": 0.5 + e / 20} for e in range(1, 6)]
    return replace(
        run,
        state=RunState.SUCCEEDED,
        plan=PLAN,
        history=(
            *run.history,
            StateChange(RunState.PLANNED, _at(0.1)),
            StateChange(RunState.SUBMITTED, _at(0.2)),
            StateChange(RunState.RUNNING, _at(1)),
            StateChange(RunState.SUCCEEDED, _at(5)),
        ),
        metrics={
            "epochs": epochs,
            "final": epochs[-1],
            "evaluation": {"split": "validation"},
            "samples_per_second": 812.5,
            "wall_time_seconds": 240.0,
        },
        timings=Timings(created_at=run.created_at, estimated_seconds=300.0, run_seconds=240.0),
        cost=Cost(estimated_usd=0.05, actual_usd=0.04),
    )


OWN_CODE_LINES = [
    {"step": 1, "epoch": 1, "loss": 0.9},
    {"epoch": 1, "accuracy": 0.7, "test_loss": 0.8},
    {"step": 2, "epoch": 2, "loss": 0.5},
    {"epoch": 2, "accuracy": 0.85, "test_loss": 0.45, "note": "fine", "flag": True},
]
"""What a team's script appends to LANDFALL_METRICS_FILE: a training line and an evaluation line per epoch."""


def own_code(run_id: str = "run-ui-own-code", lines: list[dict[str, Any]] | None = None) -> RunRecord:
    """A SUCCEEDED run of `landfall submit --script train.py`, its metrics.json as the launcher writes it from the
    script's metrics lines (schemas/user_metrics.py) and the listener stores it (schemas/run_metrics.py)."""
    import json

    from schemas.run_metrics import stored_metrics
    from schemas.user_metrics import metrics_document

    text = "\n".join(json.dumps(line) for line in lines or OWN_CODE_LINES)
    metrics, _ = stored_metrics(metrics_document(text, form="script", world_size=1))
    request = {
        "dataset": {"uri": DATASET, "object_count": 3, "total_bytes": 1200},
        "trainer": {"script": "gs://landfall-code/scripts/3f2a9c01/train.py", "args": ["--lr", "0.1"]},
    }
    return replace(succeeded(run_id), request=request, metrics=metrics)


def failed(run_id: str = "run-ui-failed") -> RunRecord:
    run = replace(new_run(run_id, _request(), now=NOW), team=RunCharge("research"))
    return replace(
        run,
        state=RunState.FAILED,
        plan=PLAN,
        history=(*run.history, StateChange(RunState.RUNNING, _at(1)), StateChange(RunState.FAILED, _at(2))),
        error=RunError(
            code="TRAINER_ERROR",
            message="CUDA out of memory. Tried to allocate 2.00 GiB",
            kind="OutOfMemoryError",
            step=120,
            reason="out-of-memory",
            replica="workerpool0-0",
            exit_code=1,
        ),
    )


def canary_and_fallback(run_id: str = "run-ui-canary") -> RunRecord:
    """A run whose canary passed, whose first plan's job ended for a stockout, and that ran on its fallback."""
    run = replace(new_run(run_id, _request(), now=NOW), team=RunCharge("ads"))
    job = "projects/p/locations/us-central1/customJobs/111"
    return replace(
        run,
        state=RunState.RUNNING,
        plan=FALLBACK_1,
        history=(
            *run.history,
            StateChange(RunState.PLANNED, _at(0.1)),
            StateChange(RunState.SUBMITTED, _at(0.2), "canary"),
            StateChange(RunState.SUBMITTING, _at(3), "stockout: next plan"),
            StateChange(RunState.SUBMITTED, _at(3.1)),
            StateChange(RunState.RUNNING, _at(4)),
        ),
        submission=Submission(
            attempts=(
                SubmissionAttempt(PLAN.region, PLAN.machine_type, _at(1), "created", PLAN),
                SubmissionAttempt(FALLBACK_1.region, FALLBACK_1.machine_type, _at(3.05), "created", FALLBACK_1),
            ),
            jobs=(JobAttempt(job, PLAN.region, PLAN.machine_type, "stockout", "resources exhausted", _at(2.9)),),
        ),
        canary=CanaryRecord(
            status="passed",
            job_name="projects/p/locations/us-central1/customJobs/110",
            job_id="110",
            region=PLAN.region,
            machine_type=PLAN.machine_type,
            submitted_at=_at(0.3),
            planned_step_seconds=0.25,
            planned_memory_bytes=2_000_000_000,
            figures=CanaryFigures(
                steps=5, step_seconds=0.26, peak_memory_bytes=1_500_000_000, memory_kind="gpu", checkpoint_ok=True
            ),
            verdict="within 25% of the plan",
        ),
    )


SEED_FIELDS = ("schema_version", "run_id", "state", "request", "created_at", "updated_at", "team")
"""What a seeded run keeps of its record: the required fields and its team's name (the rest are optional, or their
defaults), so that 10,000 of them are written to the emulator in seconds (it indexes every field)."""


def seeded(index: int, start: datetime = NOW) -> dict[str, Any]:
    """A small, valid run document for paging and filtering: state, team and dataset cycle, one second apart."""
    at = start - timedelta(seconds=index)
    state = SEED_STATES[index % len(SEED_STATES)]
    request = {"dataset": {"uri": f"gs://landfall-landing/datasets/seed-{index % 20}/"}}
    run = new_run(f"run-seed-{index:05d}", request, now=at, state=state)
    doc = replace(run, team=RunCharge(TEAMS[index % len(TEAMS)])).to_document()
    return {key: doc[key] for key in SEED_FIELDS} | {"team": {"name": doc["team"]["name"]}}  # the rest: defaults


class FakeSource:
    """The dashboard's Source over documents in memory (filtered and paged as Firestore would)."""

    def __init__(self, runs: list[RunRecord], logs: dict[str, list[str]] | None = None) -> None:
        self.docs = [r.to_dict() for r in runs]
        self.logs = logs or {}
        self.cancelled: list[str] = []
        self.versions: list[Any] = []
        """Model Registry versions the models page lists."""

    def runs(self, query: RunsQuery, limit: int) -> list[dict[str, Any]]:
        found = [
            d
            for d in sorted(self.docs, key=lambda d: d["created_at"], reverse=True)
            if (query.state is None or d["state"] == query.state)
            and (query.dataset is None or d["request"]["dataset"]["uri"] == query.dataset)
            and (query.team is None or (d.get("team") or {}).get("name") == query.team)
            and (query.since is None or d["created_at"] >= format_timestamp(query.since))
        ]
        if query.after:
            ids = [d["run_id"] for d in found]
            found = found[ids.index(query.after) + 1 :]
        return found[:limit]

    def run(self, run_id: str) -> RunRecord:
        for doc in self.docs:
            if doc["run_id"] == run_id:
                return parse_run_record(doc)
        raise CommandError(f"no run {run_id!r}; `landfall runs` lists them")

    def log_lines(self, run: RunRecord) -> tuple[list[str], str]:
        return self.logs.get(run.run_id, []), "no Vertex job yet"

    def datasets(self, limit: int) -> list[dict[str, Any]]:
        return []

    def models(self) -> list[Any]:
        return list(self.versions)

    def model_decisions(self, versions: list[Any]) -> dict[str, str]:
        from landfall.queries.models import held_decisions

        return held_decisions(versions, lambda ids: {d["run_id"]: d for d in self.docs if d["run_id"] in ids})

    def dead_letters(self) -> tuple[str, list[Any]]:
        return "projects/p/subscriptions/dead", []

    def orphans(self, limit: int) -> list[dict[str, Any]]:
        return []

    def teams(self) -> list[TeamUse]:
        return [
            TeamUse(
                "vision",
                1,
                "2026-11",
                {"NVIDIA_L4": 2},
                {"all": 2},
                40.0,
                25.0,
                100.0,
                50.0,
                runs=3,
                over=("gpus all 2/2",),
            )
        ]

    def cancel(self, run_id: str) -> str:
        self.cancelled.append(run_id)
        return f"run {run_id}: cancel requested"

    def retry(self, run_id: str) -> str:
        return f"retrying run {run_id}"

    def project(self) -> str:
        return "landfall-local"
