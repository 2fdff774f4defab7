"""JobEvent: a Vertex AI job log entry (Cloud Logging LogEntry JSON) as routed to the job-events topic by a sink.

The entry is only a hint that a job changed: the listener re-reads the job with GetCustomJob for the truth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas import json_text
from schemas.errors import SchemaError
from schemas.fields import Reader


@dataclass(frozen=True)
class JobEvent:
    job_id: str
    """The numeric CustomJob id (resource.labels.job_id)."""
    project_id: str
    task_name: str
    """"service" for Vertex's own lines, "workerpool0-0"... for replica output."""
    text: str
    severity: str
    timestamp: str
    insert_id: str = ""
    schema_version: int = 1


def parse_job_event(raw: bytes | str | dict[str, Any]) -> JobEvent:
    """Read a LogEntry naming an ml_job. Raises SchemaError for anything else (wrong resource type, no job id)."""
    if isinstance(raw, bytes | str):
        try:
            data = json_text.loads(raw)
        except json_text.JsonTextError as exc:
            raise SchemaError(f"job event is not JSON ({exc}); expected a Cloud Logging LogEntry") from exc
    else:
        data = raw
    r = Reader(data, "logEntry")
    resource = r.obj("resource")
    kind = resource.string("type")
    if kind != "ml_job":
        raise SchemaError(
            f'resource type {kind[:60]!r} is not a Vertex AI job; expected "ml_job"', field="logEntry.resource.type"
        )
    labels = resource.string_map("labels")
    job_id = labels.get("job_id", "")
    if not (job_id.isascii() and job_id.isdigit()):
        raise SchemaError(
            f"job_id {job_id[:40]!r} is not a numeric CustomJob id", field="logEntry.resource.labels.job_id"
        )
    payload = r.data.get("textPayload")
    if payload is None and isinstance(r.data.get("jsonPayload"), dict):
        payload = str(r.data["jsonPayload"].get("message", ""))
    return JobEvent(
        job_id=job_id,
        project_id=labels.get("project_id", ""),
        task_name=labels.get("task_name", ""),
        text=str(payload or ""),
        severity=r.string("severity", "DEFAULT"),
        timestamp=r.string("timestamp", ""),
        insert_id=r.string("insertId", ""),
    )
