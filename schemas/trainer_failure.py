"""TrainerFailure: the small record a training process leaves in its model directory before it exits non-zero.

The trainer writes `<AIP_MODEL_DIR>/failure.json` (beside where model.pt and metrics.json would have gone); the
completion listener reads it when Vertex reports the job FAILED and puts the trainer's own message on the run's
error, so the run says "no label column 'label'..." and not only "exited with a non-zero status of 3". The first
failing process writes it (the others usually fail because that one went away); a trainer error replaces a crash
record a peer wrote first.

    {"schema_version": 1, "kind": "DataError", "message": "gs://b/p/part-0.csv line 3: ...", "step": 12,
     "rank": 0, "exit_code": 3}
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from schemas import json_text
from schemas.errors import SchemaError
from schemas.fields import Reader

SCHEMA_VERSION = 1
FAILURE_FILE = "failure.json"
MESSAGE_LIMIT = 4000
"""Characters of the message kept (an error line, not a log)."""


@dataclass(frozen=True)
class TrainerFailure:
    kind: str
    """The trainer's error class (ConfigError, DataError, OutOfMemory, Preempted, ...) or a crash's exception type."""
    message: str
    """The error's own text, as the trainer logged it."""
    exit_code: int
    """The status the process exited with."""
    step: int | None = None
    """The training step reached, once training had started; None before."""
    rank: int | None = None
    """The global rank of the process that failed, when known."""
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def parse_trainer_failure(text: str) -> TrainerFailure:
    """Read failure.json; raises SchemaError naming the field that does not fit."""
    try:
        data = json_text.loads(text)
    except json_text.JsonTextError as exc:
        raise SchemaError(f"is not JSON ({exc})", field="failure") from exc
    r = Reader(data, "failure")
    return TrainerFailure(
        kind=r.string("kind", max_len=200),
        message=r.string("message", max_len=MESSAGE_LIMIT),
        exit_code=r.integer("exit_code"),
        step=None if r.data.get("step") is None else r.integer("step", minimum=0),
        rank=None if r.data.get("rank") is None else r.integer("rank", minimum=0),
        schema_version=r.integer("schema_version", SCHEMA_VERSION),
    )


__all__ = ["FAILURE_FILE", "MESSAGE_LIMIT", "SCHEMA_VERSION", "TrainerFailure", "parse_trainer_failure"]
