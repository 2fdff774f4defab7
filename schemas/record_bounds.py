"""How large a stored record may grow: the bounds Landfall keeps every Firestore document under, in one place, and
the document size as Firestore counts it.

Firestore refuses a document past 1 MiB (https://cloud.google.com/firestore/quotas#limits): every write to a run
that reached it would fail. A run that waits for capacity for days goes through hundreds of rounds, each with a
CreateCustomJob attempt per plan and two history entries; what grows with the rounds is kept in full only for the
most recent ones, and the rest as counts (docs/records.md says what is kept and what is summarised):

- `history`: the first HISTORY_HEAD entries and the last HISTORY_TAIL; those between are counted in
  `history_omitted` (`landfall run` and `landfall watch` say how many).
- `submission.attempts`: the first attempt (its plan is the run's first plan) and the last ATTEMPTS_KEPT; older
  ones, and every refusal, are counted in `submission.refusals` (rounds so far, the first and last refusal, counts
  by reason).
- `submission.jobs`: the last JOBS_KEPT jobs that ended for capacity (counted in `submission.refusals` too);
  `submission.job_ids` the last JOB_IDS_KEPT ids.
- A history entry names the round and the count of its refusals, and refers to `submission.attempts` for the
  messages, instead of copying them; a refusal's text is cut at TEXT_KEPT characters.
- A plan stored on the run keeps its ALTERNATIVES_KEPT best alternatives (`alternatives_considered` still counts
  all; `landfall plan` lists the planner's full list again).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

HISTORY_HEAD = 4
"""History entries kept from the start of a run: RECEIVED, PLANNED, SUBMITTING and how the first round ended."""
HISTORY_TAIL = 24
"""History entries kept from the end: the last dozen rounds of a long wait (two entries a round)."""
ATTEMPTS_KEPT = 12
"""CreateCustomJob attempts kept in full besides the first: three rounds of four plans (the plan and three
fallbacks, functions/dispatch/handler.py FALLBACKS_KEPT)."""
JOBS_KEPT = 12
"""Jobs that ended for capacity kept in full (`submission.jobs`)."""
JOB_IDS_KEPT = 200
"""Ids of earlier jobs kept (`submission.job_ids`): the listener ignores a late event of one of them; an event of an
older one waits for its run like any unknown job, then is ignored (functions/listener/handler.py)."""
ALTERNATIVES_KEPT = 5
"""Alternatives a plan stored on the run keeps (the planner returns up to 25)."""
TEXT_KEPT = 2_000
"""Characters kept of one refusal or job message (Vertex's own text), the rest cut with a note of its length."""
REASON_KEPT = 8_000
"""Characters kept of why a run waits (`submission.waiting.reason`: the last round's refusals)."""
REASONS_KEPT = 20
"""Distinct reasons counted in `submission.refusals.by_reason`; further ones are counted under OTHER_REASONS."""
OTHER_REASONS = "other"
WARNINGS_KEPT = 20
"""Warnings a run keeps (`warnings`: figures dropped, metrics cut); later ones are not stored (each warning already
counts what it stands for)."""
WARNING_TEXT = 1_000
"""Characters kept of one warning."""

DOCUMENT_LIMIT_BYTES = 1_048_576
"""Firestore's maximum document size, 1 MiB (https://cloud.google.com/firestore/quotas#limits)."""
DOCUMENT_BOUND_BYTES = 256 * 1024
"""The size every document Landfall writes stays under, whatever a run goes through (a quarter of the limit;
tests/unit/test_record_bounds.py drives a run through 200 rounds of refusals and holds every document to it)."""


def cut(text: str, limit: int = TEXT_KEPT) -> str:
    """text, or its first `limit` characters and how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _string_size(text: str) -> int:
    return len(text.encode("utf-8")) + 1


def value_size(value: Any) -> int:
    """A field value's size as Firestore counts it (https://cloud.google.com/firestore/docs/storage-size): a string
    its UTF-8 bytes + 1, an integer, float or timestamp 8, a boolean or null 1, bytes their length, an array the sum
    of its values, a map the sum of its field names' string sizes and its values' sizes."""
    if value is None or isinstance(value, bool):
        return 1
    if isinstance(value, int | float | datetime):
        return 8
    if isinstance(value, str):
        return _string_size(value)
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, list | tuple):
        return sum(value_size(v) for v in value)
    if isinstance(value, dict):
        return sum(_string_size(str(k)) + value_size(v) for k, v in value.items())
    raise TypeError(f"{type(value).__name__} is not a Firestore value")


def document_size(path: str, doc: dict[str, Any]) -> int:
    """The size of the document at `path` (collection/id[/collection/id...]) as Firestore counts it: its name (each
    collection and document id's string size + 16), its fields, and 32 bytes
    (https://cloud.google.com/firestore/docs/storage-size#document-size)."""
    name = sum(_string_size(part) for part in path.split("/")) + 16
    return name + value_size(doc) + 32


__all__ = [
    "ALTERNATIVES_KEPT",
    "ATTEMPTS_KEPT",
    "DOCUMENT_BOUND_BYTES",
    "DOCUMENT_LIMIT_BYTES",
    "HISTORY_HEAD",
    "HISTORY_TAIL",
    "JOBS_KEPT",
    "JOB_IDS_KEPT",
    "OTHER_REASONS",
    "REASONS_KEPT",
    "REASON_KEPT",
    "TEXT_KEPT",
    "WARNINGS_KEPT",
    "WARNING_TEXT",
    "cut",
    "document_size",
    "value_size",
]
