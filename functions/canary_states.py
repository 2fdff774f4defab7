"""Recording the end of a run's canary job (docs/canary.md): the rule the listener and the reconciler apply, through
functions/job_states.py, to the job a run's running canary names.

A canary that failed ends the run FAILED with the canary's reason (classified like any job's, failure_reasons) and no
long job; a cancelled one ends it CANCELLED; one that succeeded is judged from its figures (functions/records/
canary.py judge) and the run goes back to SUBMITTING, handed to the dispatcher's exactly-once path (which plans it
again first when the verdict is replan). Only the dispatcher submits jobs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Protocol

from functions.errors import PermanentError, TransientError
from functions.gcp.runs_store import RunsStore
from functions.records.attempts import job_spend
from functions.records.canary import canary_ended, judge
from schemas.canary import (
    CANARY_FOLDER,
    CANARY_REPORT_FILE,
    CanaryFigures,
    metric_line_figures,
    read_canary_report,
)
from schemas.errors import SchemaError
from schemas.job_view import JobView
from schemas.run_record import RunError, RunRecord, RunState
from schemas.user_metrics import METRICS_LINES_FILE
from schemas.vocabulary import PLATFORM, USER_CODE

log = logging.getLogger("landfall.job_events")

CANARY_MODEL_FOLDER = f"{CANARY_FOLDER}model/"
"""The canary job's model folder (AIP_MODEL_DIR), inside the run's output folder."""


class CanaryDeps(Protocol):
    """What recording a canary's end needs (functions/job_states.py JobStateDeps has it)."""

    @property
    def store(self) -> RunsStore: ...
    @property
    def read_text(self) -> Callable[[str], str | None]: ...
    @property
    def now(self) -> Callable[[], datetime]: ...
    @property
    def resubmit(self) -> Callable[[str], str] | None: ...
    @property
    def announce(self) -> Callable[[str], str] | None: ...
    @property
    def canary_margin(self) -> float: ...
    @property
    def measure_canary(self) -> Callable[[RunRecord, CanaryFigures], None] | None: ...


def is_running_canary(run: RunRecord, job: JobView) -> bool:
    return run.canary is not None and run.canary.status == "running" and run.canary.job_name == job.name


def canary_model_dir(run: RunRecord) -> str | None:
    return None if run.artifacts is None else f"{run.artifacts.output_dir}{CANARY_MODEL_FOLDER}"


def canary_job_ended(run: RunRecord, job: JobView, target: RunState, error: RunError | None, deps: CanaryDeps) -> str:
    """Record the end of the run's canary job (target: the run state the job's state means, error: the job's error,
    classified). Returns what happened."""
    figures: CanaryFigures | None = None
    notes: list[str] = []
    if target == RunState.CANCELLED:
        status, verdict = "cancelled", (error.message if error is not None else "the canary job was cancelled")
    elif target == RunState.FAILED:
        assert error is not None
        status = "failed"
        verdict = f"the canary job failed ({error.reason}): {error.message}"
        error = replace(error, code="canary-failed", message=f"the canary failed: {error.message}")
    else:
        figures, problem, notes = read_figures(run, deps.read_text)
        if figures is None:
            status, verdict = "failed", problem
            error = RunError("canary-failed", f"the canary failed: {problem}", reason=USER_CODE)
        else:
            assert run.plan is not None
            found = judge(run.plan, figures, deps.canary_margin)
            status, verdict = found.status, found.message
            if status == "failed":
                error = RunError("canary-failed", verdict, reason=PLATFORM)
    outcome = deps.store.apply(
        run.run_id,
        canary_ended(
            job.name,
            status,
            verdict=verdict,
            figures=figures,
            now=deps.now(),
            error=error,
            warnings=notes,
            spent_usd=job_spend(run.plan, job.start_time, job.end_time),
        ),
    )
    log.info("run %s: canary %s %s: %s (%s)", run.run_id, job.name, status, verdict, outcome)
    if outcome == "resubmit" and figures is not None and deps.measure_canary is not None:
        try:  # for the planner, beside what finished runs measured (plans that learn); the run goes on without it
            deps.measure_canary(run, figures)
        except (TransientError, PermanentError, SchemaError) as exc:  # a stored document that no longer reads
            log.warning("run %s: the canary's measurement was not recorded (%s)", run.run_id, exc)
    if outcome == "resubmit" and deps.resubmit is not None:
        return f"canary-{status}:resubmitted:{deps.resubmit(run.run_id)}"
    if outcome in ("failed", "cancelled") and deps.announce is not None:
        log.info("run %s: %s", run.run_id, deps.announce(run.run_id))
    return f"canary-{status}:{outcome}"


def read_figures(run: RunRecord, read_text: Callable[[str], str | None]) -> tuple[CanaryFigures | None, str, list[str]]:
    """The canary's figures: the built-in trainer's canary.json, else a team's metrics lines; None and why when it
    left neither (or canary.json does not fit its schema). Last, a note of each figure left out (outside its rule,
    schemas/run_metrics.py FIGURES), for the run's warnings."""
    folder = canary_model_dir(run)
    if folder is None:
        return None, "the run records no artifacts folder to read the canary's figures from", []
    text = read_text(f"{folder}{CANARY_REPORT_FILE}")
    if text is not None:
        try:
            figures, notes = read_canary_report(text)
        except SchemaError as exc:
            return None, f"{folder}{CANARY_REPORT_FILE} does not fit its schema: {exc}", []
        return figures, "", notes
    lines = read_text(f"{folder}{METRICS_LINES_FILE}")
    found, dropped = (None, []) if lines is None else metric_line_figures(lines)
    if found is not None and (found.steps or found.step_seconds is not None):
        return found, "", dropped
    return (
        None,
        (
            f"the canary succeeded but left no figures: neither {folder}{CANARY_REPORT_FILE} nor metrics lines with "
            f"`step` in {folder}{METRICS_LINES_FILE} (docs/trainer-contract.md, 'Canary')"
        ),
        dropped,
    )


__all__ = ["CANARY_MODEL_FOLDER", "CanaryDeps", "canary_job_ended", "is_running_canary", "read_figures"]
