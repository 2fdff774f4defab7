"""The canary: a short job on a long run's chosen shape, run with the run's own code and image before the
long job is paid for (docs/canary.md).

Two shapes live here:

- `CanaryFigures`, what a canary measured: the report the built-in trainer writes in canary mode (`canary.json` in
  the canary's model folder), or the figures read from a team's metrics lines (`step_seconds`,
  `peak_memory_bytes`, docs/trainer-contract.md);
- `CanaryRecord`, the run record's `canary` field: the canary job, its status, its figures beside the plan's and the
  verdict.

The environment a canary job gets (every form): LANDFALL_CANARY=1, LANDFALL_CANARY_STEPS (the most optimizer steps to
run) and LANDFALL_CANARY_BUCKET_BYTES (the all-reduce to time, the planned gradient bucket).

Every figure is held to its rule (schemas/run_metrics.py FIGURES: finite, of its type, in its plausible range): a
CanaryFigures holds none outside it; what a canary reported outside it is left out with a note
(`read_canary_report`, `metric_line_figures`: the notes become the run's `warnings`), and a stored figure outside
it reads as not measured, so a figure that is written always reads back.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from schemas import json_text
from schemas.errors import SchemaError
from schemas.fields import Reader
from schemas.record_bounds import FIGURE_NOTES
from schemas.run_metrics import figure_problem
from schemas.user_metrics import METRICS_LINES_FILE

CANARY_ENV = "LANDFALL_CANARY"
CANARY_STEPS_ENV = "LANDFALL_CANARY_STEPS"
CANARY_BUCKET_ENV = "LANDFALL_CANARY_BUCKET_BYTES"
CANARY_STEPS = 8
"""Optimizer steps a canary runs (LANDFALL_CANARY_STEPS; the first is warm-up)."""
BUCKET_BYTES = 64 * 1024 * 1024
"""The gradient bucket the all-reduce is timed at (LANDFALL_CANARY_BUCKET_BYTES): the built-in trainer's DDP bucket
(trainer/parallel.py bucket_cap_mb=64), capped at the model's gradients (4 bytes a parameter)."""
CANARY_FOLDER = "canary/"
"""The canary job's output folder, inside the run's (its model folder holds canary.json or the metrics lines)."""
CANARY_REPORT_FILE = "canary.json"
"""The built-in trainer's canary report, in the canary job's model folder."""
CANARY_LABEL = "landfall-phase"
"""The label that marks a run's canary job (value `canary`); the long job carries none."""
CANARY_LABEL_VALUE = "canary"

STATUSES = ("running", "passed", "replan", "replanned", "failed", "cancelled")
"""running: the canary job is the run's current job; passed: the long job goes on the same plan; replan: the
dispatcher plans the run again from the canary's figures (then replanned); failed: the run failed with the canary's
reason; cancelled: the run was cancelled during its canary."""
MEMORY_KINDS = ("gpu", "cpu-rss", "")
"""What peak_memory_bytes measures: the most GPU memory torch allocated on any process (torch.cuda.max_memory_
allocated), or, on CPU, the largest resident set of a process (resource.getrusage ru_maxrss); "" = not reported."""

_TEXT = 2000
FIGURE_FIELDS = (
    "steps",
    "step_seconds",
    "peak_memory_bytes",
    "allreduce_bytes",
    "allreduce_seconds",
    "allreduce_gbps",
    "processes",
    "checkpoint_bytes",
)
"""CanaryFigures' figures, each held to its rule in FIGURES."""


@dataclass(frozen=True)
class CanaryFigures:
    """What one canary measured; None where it was not measured."""

    steps: int = 0
    step_seconds: float | None = None
    """Mean wall time of one optimizer step at the planned micro-batch (the first step, warm-up, left out)."""
    peak_memory_bytes: int | None = None
    memory_kind: str = ""
    allreduce_bytes: int | None = None
    allreduce_seconds: float | None = None
    allreduce_gbps: float | None = None
    """Bus bandwidth of the all-reduce, GB/s (2 (n-1)/n x bytes / seconds, as nccl-tests reports busbw)."""
    processes: int | None = None
    checkpoint_bytes: int | None = None
    checkpoint_ok: bool | None = None
    """The checkpoint was written and read back equal."""
    failed: str = ""
    """What failed ("" = nothing)."""

    def __post_init__(self) -> None:
        for name in FIGURE_FIELDS:
            value = getattr(self, name)
            problem = figure_problem(name, value)
            if problem:
                raise SchemaError(f"{problem}; got {value!r:.40}", field=f"canary.{name}")
        if self.memory_kind not in MEMORY_KINDS:
            raise SchemaError(f"{self.memory_kind!r} is not one of {MEMORY_KINDS}", field="canary.memory_kind")
        if len(self.failed) > _TEXT:
            raise SchemaError(f"is {len(self.failed)} characters long; the limit is {_TEXT}", field="canary.failed")

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v is not None and v != ""}


class _Dropped:
    """Notes of the figures left out: each (figure, rule) once, with the first values met and how many in all."""

    SHOWN = 3

    def __init__(self, where: str) -> None:
        self.where = where
        self.found: dict[tuple[str, str], tuple[list[str], int]] = {}

    def checked(self, name: str, value: object) -> Any:
        """value, or None (noted) when its rule refuses it."""
        problem = figure_problem(name, value)
        if problem is None:
            return value
        shown, count = self.found.get((name, problem), ([], 0))
        if len(shown) < self.SHOWN and f"{value!r:.40}" not in shown:
            shown.append(f"{value!r:.40}")
        self.found[(name, problem)] = (shown, count + 1)
        return None

    def notes(self) -> list[str]:
        said = [
            f"{self.where}: {name} = {', '.join(shown)} left out{f' ({count} times)' if count > 1 else ''}: {problem}"
            for (name, problem), (shown, count) in self.found.items()
        ]
        more = len(said) - FIGURE_NOTES
        return said[:FIGURE_NOTES] + ([f"{self.where}: {more} more figure(s) left out"] if more > 0 else [])


def read_canary_figures(data: object, path: str = "canary") -> tuple[CanaryFigures, list[str]]:
    """Canary figures as written (canary.json, or the run's `canary.figures`): a figure outside its rule is left
    out, with a note; SchemaError naming a field of another kind that does not fit."""
    r = Reader(data, path)
    dropped = _Dropped(path)
    figures = {name: dropped.checked(name, r.data.get(name)) for name in FIGURE_FIELDS}
    figures["steps"] = figures["steps"] or 0
    for name in ("step_seconds", "allreduce_seconds", "allreduce_gbps"):
        figures[name] = None if figures[name] is None else float(figures[name])
    return (
        CanaryFigures(
            **figures,
            memory_kind=r.string("memory_kind", "", choices=MEMORY_KINDS),
            checkpoint_ok=None if r.data.get("checkpoint_ok") is None else r.boolean("checkpoint_ok"),
            failed=r.string("failed", "", max_len=_TEXT),
        ),
        dropped.notes(),
    )


def parse_canary_figures(data: object, path: str = "canary") -> CanaryFigures:
    """Stored canary figures; one outside its rule (stored before the rules) reads as not measured."""
    return read_canary_figures(data, path)[0]


def read_canary_report(text: str) -> tuple[CanaryFigures, list[str]]:
    """canary.json as the built-in trainer writes it, and a note of each figure left out; SchemaError naming the
    field that does not fit otherwise."""
    try:
        data = json_text.loads(text)
    except json_text.JsonTextError as exc:
        raise SchemaError(f"is not JSON ({exc})", field=CANARY_REPORT_FILE) from exc
    return read_canary_figures(data, CANARY_REPORT_FILE)


def parse_canary_report(text: str) -> CanaryFigures:
    return read_canary_report(text)[0]


def metric_line_figures(text: str) -> tuple[CanaryFigures, list[str]]:
    """A team's canary figures from its metrics lines (LANDFALL_METRICS_FILE): the steps it reported, the mean of
    its `step_seconds` past the first line that has one, its largest `peak_memory_bytes` (read as GPU memory unless
    a line says `memory_kind`); and a note of each figure left out (outside its rule: a step of Infinity or 1e9 s)."""
    dropped = _Dropped(f"canary {METRICS_LINES_FILE}")
    seconds: list[float] = []
    peak: int | None = None
    kind = ""
    steps = 0
    for raw in text.splitlines():
        try:
            line = json_text.loads(raw) if raw.strip() else None
        except json_text.JsonTextError:
            continue
        if not isinstance(line, dict):
            continue
        step = dropped.checked("step", line.get("step"))
        if step is not None:
            steps = max(steps, step)
        value = dropped.checked("step_seconds", line.get("step_seconds"))
        if value is not None:
            seconds.append(float(value))
        memory = dropped.checked("peak_memory_bytes", line.get("peak_memory_bytes"))
        if memory is not None:
            peak = max(peak or 0, memory)
            said = line.get("memory_kind")
            kind = said if isinstance(said, str) and said in MEMORY_KINDS else kind or "gpu"
    timed = seconds[1:] or seconds
    figures = CanaryFigures(
        steps=steps,
        step_seconds=round(sum(timed) / len(timed), 6) if timed else None,
        peak_memory_bytes=peak,
        memory_kind=kind if peak is not None else "",
    )
    return figures, dropped.notes()


def figures_from_metric_lines(text: str) -> CanaryFigures:
    return metric_line_figures(text)[0]


@dataclass(frozen=True)
class CanaryRecord:
    """The run record's `canary`: the canary job and what came of it."""

    status: str
    job_name: str
    job_id: str
    region: str
    machine_type: str
    submitted_at: str
    planned_step_seconds: float
    planned_memory_bytes: int
    ended_at: str | None = None
    figures: CanaryFigures | None = None
    verdict: str = ""
    """Why the run went on, was planned again or failed, figures beside the plan's."""
    why: str = ""
    """Why the run got a canary: its estimate past LANDFALL_CANARY_MIN_HOURS, or the first run of its workload on the
    shape. Written only when set (records from before it have none)."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": self.status,
            "job_name": self.job_name,
            "job_id": self.job_id,
            "region": self.region,
            "machine_type": self.machine_type,
            "submitted_at": self.submitted_at,
            "planned_step_seconds": self.planned_step_seconds,
            "planned_memory_bytes": self.planned_memory_bytes,
        }
        if self.ended_at is not None:
            out["ended_at"] = self.ended_at
        if self.figures is not None:
            out["figures"] = self.figures.to_dict()
        if self.verdict:
            out["verdict"] = self.verdict
        if self.why:
            out["why"] = self.why
        return out

    def ended(self, status: str, *, at: str, figures: CanaryFigures | None, verdict: str) -> CanaryRecord:
        return replace(self, status=status, ended_at=at, figures=figures, verdict=verdict[:_TEXT])


def parse_canary_record(data: object) -> CanaryRecord:
    r = Reader(data, "run.canary")
    figures = r.data.get("figures")
    return CanaryRecord(
        status=r.string("status", choices=STATUSES),
        job_name=r.string("job_name", max_len=400),
        job_id=r.string("job_id", max_len=64),
        region=r.string("region", max_len=64),
        machine_type=r.string("machine_type", max_len=64),
        submitted_at=r.string("submitted_at", max_len=64),
        planned_step_seconds=r.number("planned_step_seconds", minimum=0),
        planned_memory_bytes=r.integer("planned_memory_bytes", minimum=0),
        ended_at=None if r.data.get("ended_at") is None else r.string("ended_at", max_len=64),
        figures=None if figures is None else parse_canary_figures(figures, "run.canary.figures"),
        verdict=r.string("verdict", "", max_len=_TEXT),
        why=r.string("why", "", max_len=_TEXT),
    )


__all__ = [
    "BUCKET_BYTES",
    "CANARY_BUCKET_ENV",
    "CANARY_ENV",
    "CANARY_FOLDER",
    "CANARY_LABEL",
    "CANARY_LABEL_VALUE",
    "CANARY_REPORT_FILE",
    "CANARY_STEPS",
    "CANARY_STEPS_ENV",
    "FIGURE_FIELDS",
    "MEMORY_KINDS",
    "STATUSES",
    "CanaryFigures",
    "CanaryRecord",
    "figures_from_metric_lines",
    "metric_line_figures",
    "parse_canary_figures",
    "parse_canary_record",
    "parse_canary_report",
    "read_canary_figures",
    "read_canary_report",
]
