"""A run record in words: the short labels of a runs table (GPUs, dataset, figures, failure reason), the lines of a
run's canary and waits, and durations. Pure functions of the record, shared by `landfall runs`, `landfall run`,
`landfall watch` and the dashboard (landfall/ui/views.py), so that both say the same thing the same way."""

from __future__ import annotations

from typing import Any

from schemas.errors import SchemaError
from schemas.plan import Plan
from schemas.run_metrics import run_warnings, task_figures
from schemas.run_record import ReconcileErrors, RunRecord, RunState, parse_reconcile_errors


def fmt_value(value: Any) -> str:
    """A figure for a table cell: a float to 4 significant digits, None as "", anything else as its text."""
    return f"{value:.4g}" if isinstance(value, float) else ("" if value is None else str(value))


def duration_text(seconds: float) -> str:
    """A duration to the second: 45s, 3m 05s, 2h 07m (a negative one as 0s)."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m" if hours else (f"{minutes}m {secs:02d}s" if minutes else f"{secs}s")


def gpu_label(plan: Plan | None) -> str:
    """The plan's accelerators per replica: "2xNVIDIA_L4", "cpu", or "" with no plan."""
    if plan is None:
        return ""
    return f"{plan.accelerator_count}x{plan.accelerator_type}" if plan.accelerator_type else "cpu"


def dataset_ref(run: RunRecord) -> dict[str, Any]:
    """The request's dataset reference (a REJECTED run keeps whatever raw fields could be read)."""
    dataset = run.request.get("dataset")
    return dataset if isinstance(dataset, dict) else {}


def failure_reason(run: RunRecord) -> str:
    """Why a run ended without succeeding, in a word of schemas/vocabulary.py FAILURE_REASONS (user-code, stockout,
    ...; its error code where an older run has no reason); "" for a run that has not failed."""
    if run.error is None:
        return ""
    return run.error.reason or run.error.code


def figures_text(run: RunRecord) -> str:
    """The run's own figures for its task (schemas/run_metrics.py): accuracy, R² and RMSE, or perplexity; a '!' when
    the trainer put a warning on the run (`landfall run` says what)."""
    task = run.request.get("task")
    try:
        warned = bool(run_warnings(run.metrics))
    except SchemaError:
        warned = True
    text = ", ".join(f"{label} {fmt_value(value)}" for label, value in task_figures(str(task), run.metrics))
    return f"{text} !" if warned and text else text


def canary_lines(run: RunRecord) -> list[str]:
    """The run's canary (docs/canary.md): its job, status and verdict, and what it measured."""
    c = run.canary
    if c is None:
        return []
    lines = [f"canary    {c.status}: job {c.job_name.rsplit('/', 1)[-1]} on {c.machine_type} in {c.region}"]
    if c.verdict:
        lines.append(f"          {c.verdict}")
    f = c.figures
    if f is not None:
        measured = [f"{f.steps} steps"]
        if f.step_seconds is not None:
            measured.append(f"{f.step_seconds:.4g} s/step (planned {c.planned_step_seconds:.4g})")
        if f.peak_memory_bytes is not None:
            measured.append(f"peak {f.peak_memory_bytes / 1e9:.3g} GB {f.memory_kind or 'memory'}")
        if f.allreduce_gbps is not None:
            measured.append(f"all-reduce {f.allreduce_gbps:.3g} GB/s x {f.processes or 1}")
        if f.checkpoint_ok is not None:
            measured.append(f"checkpoint {'read back' if f.checkpoint_ok else 'read back DIFFERENT'}")
        lines.append(f"          measured: {', '.join(measured)}")
    return lines


def _refusal_lines(run: RunRecord) -> list[str]:
    """A long wait's refusals, counted (submission.refusals), once a round has ended WAITING."""
    counted = run.submission.refusals
    if counted is None:
        return []
    reasons = ", ".join(f"{n} x {reason}" for reason, n in counted.by_reason.items()) or "none"
    left_out = counted.attempts_omitted + counted.jobs_omitted
    kept = f"; the last ones in full, {left_out} older ones counted only" if left_out else ""
    return [
        f"refusals  {counted.refused} in {counted.rounds} round(s): {reasons}{kept}",
        f"          first at {counted.first_at}: {counted.first}",
        f"          last at {counted.last_at}: {counted.last}",
    ]


def wait_lines(run: RunRecord) -> list[str]:
    """Why the run waits: for capacity (WAITING, submission.waiting), for a rate limit on its plan (SUBMITTING,
    submission.queued, kept with when its job was created) and, noted by the reconciler, for its job to start
    (long_wait: open while the job is queued or pending, then kept with when it started)."""
    lines = []
    if run.state == RunState.WAITING and run.submission.waiting is not None:
        wait = run.submission.waiting
        lines.append(f"waiting   {wait.reason}; next try at {wait.retry_at} (try {wait.tries}, since {wait.since})")
    lines += _refusal_lines(run)
    queued = run.submission.queued
    if queued is not None and queued.over_at is None and run.state == RunState.SUBMITTING:
        lines.append(
            f"queued    {queued.reason} in {queued.region}; next try at {queued.retry_at} (try {queued.tries}, "
            f"since {queued.since}): {queued.message}"
        )
    elif queued is not None and queued.over_at is not None:
        lines.append(f"queued    {queued.reason} in {queued.region} from {queued.since} to {queued.over_at}")
    note = run.long_wait
    if note is not None and note.over_at is None:
        lines.append(f"waiting   {note.reason} (job {note.job_state} since {note.since}; noted {note.noted_at})")
    elif note is not None:
        lines.append(
            f"waited    {note.reason} (job {note.job_name.rsplit('/', 1)[-1]}: {note.since} to {note.over_at})"
        )
    return lines


def reconcile_lines(run: RunRecord) -> list[str]:
    """Reconcile passes in a row that failed on the run (`reconcile_errors`), with the last error."""
    return [] if run.reconcile_errors is None else [_reconcile_text(run.reconcile_errors)]


def _reconcile_text(e: ReconcileErrors) -> str:
    passes = "1 pass" if e.count == 1 else f"{e.count} passes in a row"
    return f"reconcile failed on {passes} ({e.first_seen} to {e.last_seen}); last: {e.last_error}"


def reconcile_note_of(doc: dict[str, Any]) -> str:
    """The mark of a run document that does not read as a whole (its `reconcile_errors` alone), as a clause; ""
    when it has none that reads."""
    try:
        marked = doc.get("reconcile_errors")
        return "" if marked is None else f" ({_reconcile_text(parse_reconcile_errors(marked))})"
    except SchemaError:
        return ""
