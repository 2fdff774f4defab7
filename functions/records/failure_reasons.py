"""Why a job ended: the trainer's failure kind and Vertex's error text mapped to one `error.reason` (a data table).
The reasons, and the reason each of the trainer's failure kinds means, are schemas/vocabulary.py's FAILURE_REASONS
and REASON_FOR_TRAINER_KIND.

Pure. The listener asks `classify` when it records a FAILED or CANCELLED job; the rule is the first match of:
the trainer's own kind (it knows best: a DataError is bad data whatever Vertex says), then Vertex's error text
(patterns below, in order), then Vertex's google.rpc code, else `platform`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from schemas.vocabulary import (
    CANCELLED,
    OUT_OF_MEMORY,
    PLATFORM,
    PREEMPTED,
    QUOTA,
    REASON_FOR_TRAINER_KIND,
    STOCKOUT,
    TIMEOUT,
    USER_CODE,
)

# Vertex's error text -> reason, first match wins (messages from reference/vertex.md and the emulator).
REASON_FOR_TEXT: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Resources are insufficient in region", re.I), STOCKOUT),
    (re.compile(r"preempt", re.I), PREEMPTED),
    (re.compile(r"exceed quota limits|quota", re.I), QUOTA),
    (re.compile(r"ran out of memory", re.I), OUT_OF_MEMORY),
    (re.compile(r"timeout|ran longer than", re.I), TIMEOUT),
    (re.compile(r"cancel", re.I), CANCELLED),
    (re.compile(r"exited with a non-zero status", re.I), USER_CODE),
)

# google.rpc.Code on the job's error -> reason, when the text said nothing known.
REASON_FOR_CODE: dict[int, str] = {1: CANCELLED, 4: TIMEOUT, 8: QUOTA}

_REPLICA = re.compile(r"replica (?P<replica>workerpool\d+-\d+)\b.*?non-zero status of (?P<status>\d+)", re.I)


@dataclass(frozen=True)
class Reason:
    reason: str
    replica: str | None = None
    """The replica Vertex names (workerpool0-0), when it names one."""
    exit_code: int | None = None


def classify(kind: str | None, job_message: str, job_code: int, *, exit_code: int | None = None) -> Reason:
    """The reason a job ended, with the replica and exit code Vertex's message names (or the trainer's exit code)."""
    found = _REPLICA.search(job_message or "")
    replica = found.group("replica") if found else None
    status = int(found.group("status")) if found else exit_code
    if kind and kind in REASON_FOR_TRAINER_KIND:
        return Reason(REASON_FOR_TRAINER_KIND[kind], replica, status)
    for pattern, reason in REASON_FOR_TEXT:
        if pattern.search(job_message or ""):
            return Reason(reason, replica, status)
    if kind:
        return Reason(USER_CODE, replica, status)
    return Reason(REASON_FOR_CODE.get(job_code, PLATFORM), replica, status)


__all__ = ["REASON_FOR_CODE", "REASON_FOR_TEXT", "Reason", "classify"]
