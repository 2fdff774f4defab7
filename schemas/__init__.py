"""Landfall's message and record contract: one parse function per message, one error type (SchemaError).

The names below are loaded from their modules on first use (PEP 562): importing one schema (schemas.errors,
schemas.training_request) does not import every other, so a function instance pays only for the records it
reads (cold start, bench/cold_start.py).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from schemas.errors import SchemaError
    from schemas.job_event import JobEvent, parse_job_event
    from schemas.run_record import RunRecord, RunState, parse_run_record
    from schemas.training_request import TrainingRequest, parse_training_request

_HOMES = {
    "SchemaError": "schemas.errors",
    "JobEvent": "schemas.job_event",
    "parse_job_event": "schemas.job_event",
    "RunRecord": "schemas.run_record",
    "RunState": "schemas.run_record",
    "parse_run_record": "schemas.run_record",
    "TrainingRequest": "schemas.training_request",
    "parse_training_request": "schemas.training_request",
}

__all__ = [
    "JobEvent",
    "RunRecord",
    "RunState",
    "SchemaError",
    "TrainingRequest",
    "parse_job_event",
    "parse_run_record",
    "parse_training_request",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'schemas' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value
