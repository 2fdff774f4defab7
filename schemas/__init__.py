"""Landfall's message and record contract: one parse function per message, one error type (SchemaError)."""

from schemas.errors import SchemaError
from schemas.job_event import JobEvent, parse_job_event
from schemas.run_record import RunRecord, RunState, parse_run_record
from schemas.training_request import TrainingRequest, parse_training_request

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
