"""Drive functions/main.py's entry points with the fakes wired in, and read back the decision each one made.

An entry point acknowledges by returning and asks for a redelivery by raising (functions/main.py `_run`): a
PermanentError or SchemaError is logged and acknowledged, a TransientError is logged and re-raised, and anything
else is an unexpected error, also re-raised, so the platform redelivers it for up to half an hour. The properties
hold every input to: acknowledged with a readable reason logged, or retried for a TransientError that says why;
never an unexpected exception.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import hypothesis
import pytest

from functions import main
from functions.dispatch.handler import attempt_policy
from functions.errors import TransientError
from functions.ingest.routes import ROUTES_FILE, load_routes
from functions.reconciler.handler import OPEN_STATES, ReconcilerDeps
from tests.fakes import ingest, world

MAX_REASON = 2_000
"""Longest reason a log line may carry: hostile input is cut when echoed, never written out whole."""
MAX_LOG_LINE = 4_000
"""Longest log line: room for an object name at Cloud Storage's 1,024-byte limit, a bucket and a reason."""
ENTRY_POINTS = ("on_object_finalized", "dispatch", "on_job_event", "sweep_datasets", "reconcile_runs")


@dataclass
class Decision:
    acknowledged: bool
    reason: str
    """What the entry point logged last (acknowledged) or the TransientError's message (retried)."""
    logged: list[str] = field(default_factory=list)


class Unexpected(AssertionError):
    """An entry point let an exception other than Landfall's own errors escape: a bug, retried for half an hour."""


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class Fakes:
    """One world of fakes behind every entry point: ingest's bucket and stores, the runs store and Vertex."""

    ingest: ingest.World = field(default_factory=lambda: ingest.World(load_routes(ROUTES_FILE)))
    runs: world.World = field(default_factory=world.World)

    def reconciler_deps(self) -> ReconcilerDeps:
        w = self.runs
        return ReconcilerDeps(
            open_runs=lambda: w.runs.in_states(OPEN_STATES),
            vertex=w.vertex,  # type: ignore[arg-type]
            listener=w.listener_deps,
            resubmit=lambda _run_id: "resubmitted",
            policy=attempt_policy(world.SETTINGS),
            lease_seconds=120,
            now=w.clock,
        )


@contextmanager
def wired(fakes: Fakes) -> Iterator[None]:
    """functions/wiring.py's dependency builders answer with the fakes while the block runs."""
    from functions import wiring

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(wiring, "ingest_deps", lambda: fakes.ingest.deps)
        patch.setattr(wiring, "dispatch_deps", lambda: fakes.runs.dispatch_deps)
        patch.setattr(wiring, "listener_deps", lambda: fakes.runs.listener_deps)
        patch.setattr(wiring, "reconciler_deps", fakes.reconciler_deps)
        yield


def deliver(entry_point: str, cloud_event: Any, fakes: Fakes | None = None) -> Decision:
    """Call main.<entry_point>(cloud_event) as functions-framework would; the decision it made."""
    fakes = fakes or Fakes()
    records = _Records()
    logger = logging.getLogger("landfall")
    logger.addHandler(records)
    function: Callable[[Any], None] = getattr(main, entry_point)
    try:
        with wired(fakes):
            function(cloud_event)
    except TransientError as exc:
        hypothesis.event(f"{entry_point}: retried")
        return Decision(False, str(exc), [r.getMessage() for r in records.records])
    except Exception as exc:
        raise Unexpected(
            f"{entry_point} raised {type(exc).__name__} (retried as an unexpected error): "
            f"{str(exc)[:500]}\n{''.join(traceback.format_exception(exc))[-3000:]}"
        ) from exc
    finally:
        logger.removeHandler(records)
    said = [r.getMessage() for r in records.records if r.name == "landfall"]
    assert said, f"{entry_point} acknowledged without logging why"
    for line in (r.getMessage() for r in records.records):
        assert len(line) <= MAX_LOG_LINE, f"a {len(line)}-character log line: {line[:300]!r}..."
    hypothesis.event(f"{entry_point}: {_kind(said[-1])}")
    return Decision(True, said[-1], [r.getMessage() for r in records.records])


def _kind(reason: str) -> str:
    """The gist of a logged reason for hypothesis' statistics: its first words, without ids or quoted input."""
    gist = reason.split(": ", 1)[-1].split("'")[0].split(" (")[0]
    return " ".join(w for w in gist.split()[:6] if not any(c.isdigit() for c in w))


def assert_readable(reason: str, what: str = "reason") -> None:
    """A reason a person can read: some words, bounded, printable."""
    assert reason.strip(), f"empty {what}"
    assert len(reason) <= MAX_REASON, f"{what} is {len(reason)} characters: {reason[:300]!r}..."
    assert sum(c.isalpha() for c in reason) >= 8, f"{what} says nothing: {reason!r}"


def firestore_storable(value: Any) -> bool:
    """Whether a document is one Firestore can store: integers within int64, UTF-8 text (no lone surrogates), maps
    and arrays at most 20 deep. The fakes keep any dict; the real store refuses these, and a refused write is
    retried."""
    return _storable(value, 0)


def _storable(value: Any, depth: int) -> bool:
    if depth > 20:
        return False
    if isinstance(value, bool) or value is None:
        return True
    if isinstance(value, int):
        return -(2**63) <= value < 2**63
    if isinstance(value, str):
        return _utf8(value)
    if isinstance(value, list | tuple):
        return all(_storable(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _utf8(k) and _storable(v, depth + 1) for k, v in value.items())
    return True  # datetimes and the like, written by Landfall itself


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
