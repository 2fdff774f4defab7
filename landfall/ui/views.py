"""What the dashboard's pages show, from the records the CLI reads: plain dicts and lists for the templates, built by
pure functions (no client, no request), so they are tested as the CLI's renderers are. The words are the CLI's:
landfall/words.py holds what both print."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from landfall.figures import epoch_figures
from landfall.queries.runs import parse_runs
from landfall.trainer_log import parse_record
from landfall.words import (
    EPOCH_MESSAGE,
    RUN_STATES,
    STEP_MESSAGE,
    alternative_gpu_label,
    canary_lines,
    code_text,
    cost_text,
    dataset_ref,
    error_where,
    extension_text,
    failure_reason,
    figures_text,
    final_figures_text,
    fmt_value,
    gpu_label,
    job_id_of,
    progress_line,
    reconcile_lines,
    resumed_text,
    seconds_text,
    spot_text,
    wait_lines,
)
from schemas.plan import Plan
from schemas.run_record import RunRecord

PAGE_SIZE = 50
"""Runs per page of the runs table."""
LOG_TAIL_LINES = 60
"""Lines of the chief replica's log shown on a run's page."""


def team_of(run: RunRecord) -> str:
    """The team the run counts against (run record `team`, docs/teams.md), or "" where no team owns it."""
    return run.team.name if run.team is not None else ""


def run_row(run: RunRecord) -> dict[str, str]:
    """One row of the runs table."""
    plan = run.plan
    machine = f"{plan.replica_count} x {plan.machine_type} ({gpu_label(plan)})" if plan else ""
    return {
        "run_id": run.run_id,
        "state": run.state.value,
        "reason": failure_reason(run),
        "created": run.created_at,
        "dataset": str(dataset_ref(run).get("uri") or ""),
        "team": team_of(run),
        "machine": machine,
        "region": plan.region if plan else "",
        "code": code_text(run),
        "metric": figures_text(run),
        "figures": final_figures_text(run),
        "resumed": resumed_text(run.metrics),
        "extended": extension_text(run),
        "est_cost": cost_text(run.cost.estimated_usd),
        "cost": cost_text(run.cost.actual_usd),
        "est_time": seconds_text(run.timings.estimated_seconds),
        "time": seconds_text(run.timings.run_seconds),
    }


def reconcile_note(run: RunRecord) -> str:
    """Reconcile passes in a row that failed on the run, as `landfall run` says it ("" when none did)."""
    return " ".join(" ".join(line.split()[1:]) for line in reconcile_lines(run))


@dataclass(frozen=True)
class Event:
    """One line of a run's timeline: when, what kind (state, attempt, fallback, job ended, wait, canary), and what."""

    at: str
    kind: str
    text: str


def timeline(run: RunRecord) -> list[Event]:
    """Every state change, every CreateCustomJob attempt (those on a plan other than the first tried are fallbacks),
    every job that ended for capacity, the waits and the canary, in time order."""
    events = [Event(h.at, "state", f"{h.state.value}" + (f": {h.detail}" if h.detail else "")) for h in run.history]
    if run.history_omitted:
        events.append(
            Event("", "state", f"{run.history_omitted} entries left out of the record (counted under refusals)")
        )
    attempts = run.submission.attempts or ()
    first = (attempts[0].machine_type, attempts[0].region) if attempts else None
    for attempt in attempts:
        fallback = (attempt.machine_type, attempt.region) != first  # the planner's first choice was tried first
        events.append(
            Event(
                attempt.at,
                "fallback" if fallback else "attempt",
                f"CreateCustomJob on {attempt.machine_type} in {attempt.region}: {attempt.outcome}"
                + (" (a fallback plan)" if fallback else ""),
            )
        )
    for job in run.submission.jobs or ():
        events.append(
            Event(
                job.at,
                "job ended",
                f"job {job_id_of(job.job_name)} on {job.machine_type} in {job.region}: {job.reason}: {job.message}",
            )
        )
    waits = wait_lines(run)
    for line in waits:
        events.append(Event("", "wait", " ".join(line.split())))
    canary = canary_lines(run)
    if canary and run.canary is not None:
        events.append(Event(run.canary.submitted_at, "canary", "; ".join(" ".join(line.split()) for line in canary)))
    dated = sorted((e for e in events if e.at), key=lambda e: e.at)
    return dated + [e for e in events if not e.at]


@dataclass(frozen=True)
class PlanRow:
    rank: str
    machine: str
    gpu: str
    region: str
    spot: str
    cost: str
    hours: str
    why: str
    chosen: bool = False


def plan_rows(plan: Plan | None) -> list[PlanRow]:
    """The chosen plan, marked, then every alternative with the reason it lost."""
    if plan is None:
        return []
    rows = [
        PlanRow(
            "1",
            f"{plan.replica_count} x {plan.machine_type}",
            gpu_label(plan),
            plan.region,
            spot_text(plan.spot),
            cost_text(plan.estimated_cost_usd),
            fmt_value(plan.estimated_hours),
            f"chosen (objective: {plan.objective})",
            chosen=True,
        )
    ]
    for a in plan.alternatives:
        rows.append(
            PlanRow(
                str(a.rank),
                a.machine_type,
                alternative_gpu_label(a),
                a.region or "-",
                spot_text(a.spot),
                cost_text(a.estimated_cost_usd),
                fmt_value(a.estimated_hours),
                a.reason,
            )
        )
    return rows


def canary_rows(run: RunRecord) -> list[tuple[str, str, str]]:
    """(figure, planned, measured by the canary) for the run's canary."""
    c = run.canary
    if c is None:
        return []
    f = c.figures
    rows = [("status", "", c.status + (f": {c.verdict}" if c.verdict else ""))]
    if c.why:
        rows.append(("why a canary", "", c.why))
    measured_step = fmt_value(f.step_seconds) if f and f.step_seconds else ""
    rows.append(("step time (s)", fmt_value(c.planned_step_seconds), measured_step))
    if f is not None:
        if f.peak_memory_bytes is not None:
            rows.append(
                (
                    "peak memory (GB)",
                    f"{c.planned_memory_bytes / 1e9:.3g}",
                    f"{f.peak_memory_bytes / 1e9:.3g} {f.memory_kind or ''}".strip(),
                )
            )
        if f.allreduce_gbps is not None:
            rows.append(("all-reduce (GB/s)", "", f"{f.allreduce_gbps:.3g} x {f.processes or 1}"))
        if f.checkpoint_ok is not None:
            rows.append(("checkpoint", "", "read back" if f.checkpoint_ok else "read back DIFFERENT"))
        rows.append(("steps", "", str(f.steps)))
    return rows


@dataclass
class Curves:
    """Aligned series for the chart (uPlot's data layout: x values, then one list per series, None where a series
    has no point), with their labels."""

    x_label: str
    x: list[float] = field(default_factory=list)
    series: dict[str, list[float | None]] = field(default_factory=dict)

    def add(self, x: float, label: str, y: float) -> None:
        if x not in self.x:
            self.x.append(x)
            for values in self.series.values():
                values.append(None)
        column = self.series.setdefault(label, [None] * len(self.x))
        column[self.x.index(x)] = y

    def to_dict(self) -> dict[str, Any]:
        order = sorted(range(len(self.x)), key=lambda i: self.x[i])
        return {
            "x_label": self.x_label,
            "labels": list(self.series),
            "data": [[self.x[i] for i in order], *([values[i] for i in order] for values in self.series.values())],
        }


def _number(value: Any) -> float | None:
    """A figure to plot: a finite number (a loss that went NaN or Infinity is left out: a gap in its curve)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def finite_json(value: Any) -> Any:
    """value with every NaN and Infinity replaced by None, so that it is valid JSON (null): what the pages embed and
    `/api/runs/RUN_ID` answers."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_json(v) for v in value]
    return value


SPLIT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,40}")
"""A split's name as a series label (validation, test, held-out): what a log or metrics.json says only when it is a
plain word, since the chart library writes labels into the page."""


def _split(value: Any) -> str:
    return value if isinstance(value, str) and SPLIT_NAME.fullmatch(value) else "held-out"


def curves_from_logs(lines: list[str]) -> Curves:
    """While it trains: the training loss of each `training` record and, at the step of each `epoch finished`, the
    held-out loss and metric (trainer/loop.py's records, as `landfall watch` reads them)."""
    curves = Curves("step")
    for record in filter(None, map(parse_record, lines)):
        step = _number(record.get("step"))
        if step is None:
            continue
        if record["message"] == STEP_MESSAGE and (loss := _number(record.get("loss"))) is not None:
            curves.add(step, "train loss", loss)
        elif record["message"] == EPOCH_MESSAGE:
            split = _split(record.get("evaluated_on"))
            if (loss := _number(record.get("loss"))) is not None:
                curves.add(step, f"{split} loss", loss)
            for metric in ("accuracy", "r2", "perplexity"):
                if (value := _number(record.get(metric))) is not None:
                    curves.add(step, f"{split} {metric}", value)
    return curves


def curves_from_metrics(metrics: dict[str, Any]) -> Curves:
    """Once it ended: every per-epoch figure of metrics.json (landfall/figures.py epoch_figures: the built-in
    trainer's held-out loss and metrics, named for the split they were measured on; each figure a team's code
    reported on a line with an `epoch`, by its own name), else the training loss per step a team's code reported
    (`loss_curve`, schemas/user_metrics.py)."""
    evaluation = metrics.get("evaluation")
    split = _split(evaluation.get("split") if isinstance(evaluation, dict) else None)
    prefix = "" if isinstance(metrics.get("trainer"), str) else f"{split} "  # `trainer`: a team's code's document
    epochs = epoch_figures(metrics)
    if epochs:
        curves = Curves("epoch")
        for e in epochs:
            for key, value in e.items():
                if key not in ("epoch", "step"):  # counters, not figures to plot
                    curves.add(e["epoch"], f"{prefix}{key}", value)
        return curves
    curves = Curves("step")
    for point in metrics.get("loss_curve") or []:
        if not isinstance(point, dict):
            continue
        x, loss = _number(point.get("step")), _number(point.get("loss"))
        if x is not None and loss is not None:
            curves.add(x, "train loss", loss)
    return curves


def run_curves(run: RunRecord, log_lines: list[str]) -> Curves:
    """The curves the logs give while the run trains, else those of its metrics.json."""
    live = curves_from_logs(log_lines)
    if live.x and not (run.state.terminal and run.metrics):
        return live
    return curves_from_metrics(run.metrics or {}) if run.metrics else live


def progress(run: RunRecord, log_lines: list[str]) -> str:
    """Step of the planned total, throughput and ETA while it trains (`landfall watch`'s line); once it ended, its
    samples per second and wall time."""
    if not run.state.terminal:
        return progress_line(log_lines) or ""
    metrics = run.metrics or {}
    parts = [
        f"{label} {fmt_value(metrics.get(key))}"
        for key, label in (
            ("samples_per_second", "samples/s"),
            ("tokens_per_second", "tokens/s"),
            ("wall_time_seconds", "wall s"),
        )
        if isinstance(metrics.get(key), int | float)
    ]
    return ", ".join(parts)


def failure(run: RunRecord) -> dict[str, str] | None:
    """The classified reason, the message and the trainer's own line (its kind and step, Vertex's message)."""
    error = run.error
    if error is None:
        return None
    replica = (
        f"replica {error.replica}" + (f", exit code {error.exit_code}" if error.exit_code is not None else "")
        if error.replica
        else ""
    )
    return {
        "reason": failure_reason(run),
        "code": error.code,
        "message": error.message,
        "where": error_where(run),
        "replica": replica,
        "job_message": error.job_message or "",
    }


def vertex_console_url(run: RunRecord, project: str) -> str:
    """The Vertex AI console page of the run's job (Google Cloud only; the local stack has none)."""
    if run.vertex is None:
        return ""
    return (
        f"https://console.cloud.google.com/vertex-ai/locations/{run.vertex.region}/training/"
        f"{run.vertex.job_id}/cpu?project={project}"
    )


def is_open(run: RunRecord) -> bool:
    return not run.state.terminal


def readable(docs: list[dict[str, Any]]) -> tuple[list[RunRecord], list[str]]:
    """The documents that fit the run record schema, and a line for each one that does not (shown, not hidden)."""
    read = parse_runs(docs)
    skipped = [f"run {u.key!r} does not fit the run record schema: {u.problem}{u.note}" for u in read.unreadable]
    return list(read.runs), skipped


def parse_since(text: str) -> datetime | None:
    """The time filter: an RFC 3339 time with a zone, or a date (midnight UTC); "" for none. Raises SchemaError."""
    from schemas.times import parse_timestamp

    text = text.strip()
    if not text:
        return None
    if len(text) == 10:
        text += "T00:00:00Z"
    return parse_timestamp(text, field="since")


STATES = list(RUN_STATES)


def short_time(text: str) -> str:
    """A stored RFC 3339 time as a person reads it, to the second: 2026-11-22 12:00:05 UTC ("" stays "")."""
    if len(text) >= 19 and text[10] == "T" and text.endswith("Z"):
        return f"{text[:10]} {text[11:19]} UTC"
    return text
