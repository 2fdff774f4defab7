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

What a team's code writes (its metrics.json or metrics lines, kept as the run's `metrics`; the metadata of its
registry model version) is held by `bounded_value` to STORED_BOUNDS: nesting depth, values in all, characters of a
string and bytes in all, and to what Firestore takes at all (no array directly in an array, no NaN or Infinity, no
integer past 64 bits, field names of at most KEY_KEPT characters that are not `__reserved__`). What is left out or
cut is said in notes, which become the run's `warnings`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
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

KEY_KEPT = 200
"""Characters of a field name in a stored value (Firestore allows 1,500 bytes; a metric's name is a word)."""

CANCEL_BY_KEPT = 200
"""The most a cancel request's `by` (who asked, and why) holds."""


@dataclass(frozen=True)
class ValueBounds:
    """What a stored value that a team's code wrote may hold (bounded_value)."""

    depth: int
    """Levels of maps and arrays inside the value (Firestore allows 20 in a whole document)."""
    fields: int
    """Values in all, maps' fields and arrays' items at every level (Firestore allows 20,000 fields a document)."""
    text: int
    """Characters of one string; a longer one is cut with a note of its length (cut)."""
    size: int
    """Bytes in all, as Firestore counts them (value_size); values past it are left out."""


STORED_BOUNDS = ValueBounds(depth=10, fields=5_000, text=TEXT_KEPT, size=64 * 1024)
"""The bounds of a run's `metrics` and of a registry version's metadata: the built-in trainer's metrics.json of a
long run (an entry per epoch) and a team's 1,000-point loss curve fit well inside."""

DOCUMENT_LIMIT_BYTES = 1_048_576
"""Firestore's maximum document size, 1 MiB (https://cloud.google.com/firestore/quotas#limits)."""
DOCUMENT_BOUND_BYTES = 256 * 1024
"""The size every document Landfall writes stays under, whatever a run goes through (a quarter of the limit;
tests/unit/test_record_bounds.py drives a run through 200 rounds of refusals and holds every document to it)."""


def cut(text: str, limit: int = TEXT_KEPT) -> str:
    """text, or its first `limit` characters and how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def cut_within(text: str, limit: int) -> str:
    """text, or as much of it as fits in `limit` characters with the note of how long it was (cut again, it stays
    as it is)."""
    if len(text) <= limit:
        return text
    note = f"... ({len(text)} characters)"
    return f"{text[: max(0, limit - len(note))]}{note}"[:limit]


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


def _storable_key(key: object, limit: int) -> bool:
    if not isinstance(key, str) or not key or len(key) > limit or re.fullmatch(r"__.*__", key):
        return False
    return _utf8(key)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate escape ("\\ud800"): no UTF-8 encoder writes it
        return False
    return True


def _text(text: str) -> str:
    """text as UTF-8 can write it: a lone surrogate as its escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def number_problem(value: int | float) -> str | None:
    """Why Firestore cannot store the number as a figure (NaN, an Infinity, an integer past 64 bits), or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        return "the integer does not fit in 64 bits"
    return None


Check = Callable[[str, object], "str | None"]
"""(field name, a number) -> why it is left out, or None to keep it: the figure rules (schemas/run_metrics.py)."""

FIGURE_NOTES = 5
"""Figures left out that are named one by one in the notes; the rest are counted."""

_NOTES = {
    "depth": "{n} value(s) nested deeper than {depth} levels left out (first: {first})",
    "array": "{n} array(s) directly inside an array left out: Firestore stores no nested arrays (first: {first})",
    "fields": "{n} value(s) past the first {fields} left out (first: {first})",
    "size": "{n} value(s) left out to keep it under {size:,} bytes (first: {first})",
    "text": "{n} string(s) cut to {text:,} characters (first: {first})",
    "key": "{n} field(s) left out whose name is empty, longer than {key} characters, __reserved__ or not text "
    "(first: {first})",
    "kind": "{n} value(s) left out that are not JSON values, or text that is not Unicode (first: {first})",
}


class _Bounder:
    def __init__(self, bounds: ValueBounds, check: Check | None) -> None:
        self.bounds = bounds
        self.check = check
        self.fields_left = bounds.fields
        self.bytes_left = bounds.size
        self.counts: dict[str, int] = {}
        self.first: dict[str, str] = {}
        self.figures: list[str] = []
        self.more_figures = 0

    def note(self, kind: str, first: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.first.setdefault(kind, first)

    def notes(self, where: str) -> list[str]:
        b = self.bounds
        said = [
            f"{where}: "
            + _NOTES[kind].format(
                n=n, first=self.first[kind], depth=b.depth, fields=b.fields, size=b.size, text=b.text, key=KEY_KEPT
            )
            for kind, n in self.counts.items()
        ]
        if self.more_figures:
            said.append(f"{where}: {self.more_figures} more figure(s) left out")
        return [*self.figures, *said]

    def take(self, cost: int, path: str) -> bool:
        """Charge one value of `cost` bytes; False (and a note) when the bounds are spent."""
        if self.fields_left <= 0:
            self.note("fields", path)
            return False
        if cost > self.bytes_left:
            self.note("size", path)
            return False
        self.fields_left -= 1
        self.bytes_left -= cost
        return True

    def value(self, value: object, path: str, name: str, depth: int, in_array: bool) -> tuple[bool, Any]:
        if isinstance(value, Mapping | list | tuple):
            if depth > self.bounds.depth:
                self.note("depth", path)
                return False, None
            if in_array and not isinstance(value, Mapping):
                self.note("array", path)
                return False, None
            if not self.take(0, path):
                return False, None
            return True, self.container(value, path, name, depth)
        if isinstance(value, str):
            if not _utf8(value):
                self.note("kind", path)
                return False, None
            if len(value) > self.bounds.text:
                self.note("text", f"{path}, {len(value):,} characters")
                value = cut_within(value, self.bounds.text)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            problem = (self.check(name, value) if self.check else None) or number_problem(value)
            if problem:
                if len(self.figures) < FIGURE_NOTES:
                    self.figures.append(f"{path} = {value!r:.40} left out: {problem}")
                else:
                    self.more_figures += 1
                return False, None
        elif value is not None and not isinstance(value, bool):
            self.note("kind", path)
            return False, None
        return (True, value) if self.take(value_size(value), path) else (False, None)

    def container(
        self, value: Mapping[Any, Any] | list[Any] | tuple[Any, ...], path: str, name: str, depth: int
    ) -> Any:
        if not isinstance(value, Mapping):
            items = (self.value(v, f"{path}[{i}]", name, depth + 1, True) for i, v in enumerate(value))
            return [v for keep, v in items if keep]
        out: dict[str, Any] = {}
        for key, item in value.items():
            shown = f"{path}.{_text(str(key)[:80])}"
            if not _storable_key(key, KEY_KEPT):
                self.note("key", shown)
                continue
            if self.bytes_left < _string_size(key):
                self.note("size", shown)
                continue
            self.bytes_left -= _string_size(key)
            keep, kept = self.value(item, shown, key, depth + 1, False)
            if keep:
                out[key] = kept
        return out


def bounded_value(
    value: Mapping[str, Any], where: str, bounds: ValueBounds = STORED_BOUNDS, check: Check | None = None
) -> tuple[dict[str, Any], list[str]]:
    """A map a team's code wrote, as Landfall stores it: within `bounds`, every number one Firestore stores and
    `check` keeps, every field name and string one it takes; and notes, each naming `where` and what was left out
    or cut (none when the value was kept whole). Values are kept in order until the bounds are spent."""
    bounder = _Bounder(bounds, check)
    kept = bounder.container(value, where, "", 0)
    return kept, bounder.notes(where)


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
    "FIGURE_NOTES",
    "HISTORY_HEAD",
    "HISTORY_TAIL",
    "JOBS_KEPT",
    "JOB_IDS_KEPT",
    "KEY_KEPT",
    "OTHER_REASONS",
    "REASONS_KEPT",
    "REASON_KEPT",
    "STORED_BOUNDS",
    "TEXT_KEPT",
    "WARNINGS_KEPT",
    "WARNING_TEXT",
    "Check",
    "ValueBounds",
    "bounded_value",
    "cut",
    "cut_within",
    "document_size",
    "number_problem",
    "value_size",
]
