"""RunFinished: published on the `landfall-run-results` topic when a run ends, so other systems react without polling.

One message per run: whoever records the run's terminal state (the listener, the reconciler) publishes it, then marks
`submission.results_published` on the run in a transaction; a later delivery finds the flag and publishes nothing,
and the reconciler publishes for terminal runs whose flag is still unset (the publisher died in between). Pub/Sub
itself delivers at least once: a consumer deduplicates on `run_id` (also the message's `run_id` attribute).

    {"schema_version": 1, "run_id": "run-...", "state": "SUCCEEDED", "reason": "", "message": "",
     "finished_at": "2026-11-22T12:07:31Z", "metrics": {...}, "artifacts": {"model_dir": "gs://...", ...},
     "cost": {"estimated_usd": 0.0044, "actual_usd": 0.0031, "actual_basis": "..."},
     "model": {"model": "projects/.../models/landfall-default-tabular-iris", "version_id": "3", "promotion": {...}}}

`model` (schemas/model_version.py) names the Vertex AI Model Registry version of a SUCCEEDED run's model and its
promotion decision; {} when the run registered none (it did not succeed, or ended before registration existed).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from schemas import json_text
from schemas.errors import SchemaError
from schemas.fields import Reader
from schemas.model_version import parse_model_version
from schemas.run_record import TERMINAL_STATES, RunRecord, RunState

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class RunFinished:
    run_id: str
    state: str
    """The terminal RunState: SUCCEEDED, FAILED, CANCELLED or REJECTED."""
    finished_at: str
    """RFC 3339: when the run reached that state (its last history entry)."""
    reason: str = ""
    """The error's reason (schemas.run_record failure reasons: stockout, user-code, ...); "" for a success."""
    message: str = ""
    """The error's one line for a person; "" for a success."""
    metrics: dict[str, Any] = field(default_factory=dict)
    """The trainer's metrics.json for a SUCCEEDED run; {} otherwise."""
    artifacts: dict[str, str] = field(default_factory=dict)
    """output_dir, model_dir, checkpoint_dir, tensorboard_dir (gs:// URIs); {} when the run had no job."""
    cost: dict[str, Any] = field(default_factory=dict)
    """estimated_usd, actual_usd, actual_basis, as far as known."""
    model: dict[str, Any] = field(default_factory=dict)
    """The registry version holding the run's model and its promotion decision (ModelVersionRef.to_dict()); {}
    when none was registered."""
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True).encode()


def run_finished(run: RunRecord) -> RunFinished:
    """The message for a terminal run; ValueError for a run that has not ended (nothing to announce)."""
    if not run.state.terminal:
        raise ValueError(
            f"run {run.run_id} is {run.state}, not ended: RunFinished is for SUCCEEDED, FAILED, "
            "CANCELLED or REJECTED runs"
        )
    error = run.error
    return RunFinished(
        run_id=run.run_id,
        state=run.state.value,
        finished_at=run.history[-1].at if run.history else run.updated_at,
        reason="" if error is None else (error.reason or error.code),
        message="" if error is None else error.message,
        metrics=dict(run.metrics or {}) if run.state == RunState.SUCCEEDED else {},
        artifacts={} if run.artifacts is None else asdict(run.artifacts),
        cost=run.cost.to_dict(),
        model={} if run.model is None else run.model.to_dict(),
    )


def parse_run_finished(data: bytes | str) -> RunFinished:
    """Read a RunFinished message; raises SchemaError naming the field that does not fit."""
    try:
        doc = json_text.loads(data)
    except json_text.JsonTextError as exc:
        raise SchemaError(f"is not JSON ({exc})", field="run_finished") from exc
    r = Reader(doc, "run_finished")
    metrics, artifacts, cost = r.optional_obj("metrics"), r.optional_obj("artifacts"), r.optional_obj("cost")
    model = r.optional_obj("model")
    return RunFinished(
        run_id=r.string("run_id", max_len=200),
        state=r.string("state", choices=tuple(sorted(s.value for s in TERMINAL_STATES))),
        finished_at=r.timestamp("finished_at"),
        reason=r.string("reason", ""),
        message=r.string("message", "", max_len=8000),
        metrics={} if metrics is None else dict(metrics.data),
        artifacts={} if artifacts is None else r.string_map("artifacts"),
        cost={} if cost is None else dict(cost.data),
        model={} if model is None or not model.data else parse_model_version(model).to_dict(),
        schema_version=r.integer("schema_version", SCHEMA_VERSION),
    )


__all__ = ["SCHEMA_VERSION", "RunFinished", "parse_run_finished", "run_finished"]
