"""The failure record (schemas/trainer_failure.py) a training process leaves in AIP_MODEL_DIR before it exits
non-zero, so the run's error can carry the trainer's own reason.

Which record stays when several processes fail: one of the trainer's own errors (bad flags, bad data, out of memory)
is written unless another such error is already recorded; any other failure (a crash, mostly a peer noticing that
the failing rank went away; a process killed by a signal) is only created where no record is, atomically, so it
never replaces a trainer error that got there first.
"""

from __future__ import annotations

from collections.abc import Mapping

from schemas.errors import SchemaError
from schemas.trainer_failure import FAILURE_FILE, MESSAGE_LIMIT, TrainerFailure, parse_trainer_failure
from trainer import storage
from trainer.errors import ConfigError, DataError, OutOfMemory, TrainerError
from trainer.logs import log

TRAINER_KINDS = frozenset(cls.__name__ for cls in (TrainerError, ConfigError, DataError, OutOfMemory))
"""Kinds that name a cause the trainer found itself (a Preempted replica leaves no record: Vertex restarts it)."""
_STEP_ATTRIBUTE = "landfall_step"


def note_step(exc: BaseException, step: int) -> None:
    """Remember on the exception the step training had reached when it was raised."""
    setattr(exc, _STEP_ATTRIBUTE, step)


def failure_of(
    exc: BaseException, exit_code: int, environ: Mapping[str, str], kind: str | None = None, message: str | None = None
) -> TrainerFailure:
    """The record of exc: its class name as the kind (or kind), its text (or message) cut to the schema's limit."""
    text = message if message is not None else (str(exc) or type(exc).__name__)
    if len(text) > MESSAGE_LIMIT:
        text = text[: MESSAGE_LIMIT - 3] + "..."
    step = getattr(exc, _STEP_ATTRIBUTE, None)
    rank = environ.get("RANK", "")
    return TrainerFailure(
        kind=kind or type(exc).__name__,
        message=text,
        exit_code=exit_code,
        step=step if isinstance(step, int) else None,
        rank=int(rank) if rank.isdigit() else None,
    )


def record_failure(environ: Mapping[str, str], failure: TrainerFailure) -> str | None:
    """Write failure.json into AIP_MODEL_DIR unless a record that should stay is there; returns its URI when written.

    Never raises: not being able to record a failure must not hide the failure itself (the exit status and the log
    line still tell it), so a storage error is logged as a warning."""
    model_dir = environ.get("AIP_MODEL_DIR")
    if not model_dir:
        return None
    uri = storage.join(model_dir, FAILURE_FILE)
    data = failure.to_json().encode()
    try:
        if failure.kind not in TRAINER_KINDS:
            return uri if storage.create_bytes(uri, data, "application/json") else None
        if storage.exists(uri) and _kind(uri) in TRAINER_KINDS:
            return None
        storage.write_bytes(uri, data, "application/json")
    except Exception as exc:  # any storage client error: see the docstring
        log(f"could not write the failure record {uri}: {exc}", severity="WARNING")
        return None
    return uri


def _kind(uri: str) -> str | None:
    with storage.open_read(uri) as fh:
        text = fh.read().decode("utf-8", errors="replace")
    try:
        return parse_trainer_failure(text).kind
    except SchemaError:
        return None
