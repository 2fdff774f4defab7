"""Pure rules for changing a run document: forward-only states, history, and the submission claim.

The Firestore adapter (runs_store.py) applies these inside transactions; tests exercise them without a server.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from schemas.run_record import RunState, can_move, parse_state
from schemas.times import format_timestamp, parse_timestamp

Doc = dict[str, Any]


def transitioned(doc: Doc, new_state: RunState, *, now: datetime, detail: str = "",
                 updates: Doc | None = None) -> Doc | None:
    """The document after moving to new_state, or None when that move is not allowed from its current state.

    Moving to the state it is already in applies `updates` without a new history entry (a repeated event).
    """
    current = parse_state(doc["state"])
    if current != new_state and not can_move(current, new_state):
        return None
    out = copy.deepcopy(doc)
    stamp = format_timestamp(now)
    for key, value in (updates or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    if current != new_state:
        out["state"] = new_state.value
        out["history"] = [*out.get("history", []), {"state": new_state.value, "at": stamp, "detail": detail}]
    out["updated_at"] = stamp
    return out


class ClaimOutcome:
    CLAIMED = "claimed"
    """This delivery owns the submission; nothing was attempted before."""
    RECOVER = "recover"
    """A previous owner's lease ran out mid-submission: look for its job before submitting again."""
    BUSY = "busy"
    """Another delivery holds a live lease: retry later."""
    DONE = "done"
    """Already submitted (or ended): nothing to do."""
    NOT_READY = "not-ready"
    """The run is not planned yet."""


@dataclass(frozen=True)
class Claim:
    outcome: str
    doc: Doc


def claimed(doc: Doc, *, owner: str, now: datetime, lease_seconds: int) -> Claim:
    """Decide whether `owner` may submit the run's job, and the document that records its lease."""
    state = parse_state(doc["state"])
    submission = dict(doc.get("submission") or {})
    lease = {"owner": owner, "lease_until": format_timestamp(now + timedelta(seconds=lease_seconds))}
    if state == RunState.PLANNED:
        new = transitioned(doc, RunState.SUBMITTING, now=now, detail="claimed for submission",
                           updates={"submission": {**submission, **lease}})
        assert new is not None
        return Claim(ClaimOutcome.CLAIMED, new)
    if state == RunState.SUBMITTING:
        until = submission.get("lease_until", "")
        live = bool(until) and parse_timestamp(until, field="submission.lease_until") > now
        if live and submission.get("owner") != owner:
            return Claim(ClaimOutcome.BUSY, doc)
        new = transitioned(doc, RunState.SUBMITTING, now=now, updates={"submission": {**submission, **lease}})
        assert new is not None
        return Claim(ClaimOutcome.RECOVER, new)
    if state in (RunState.RECEIVED,):
        return Claim(ClaimOutcome.NOT_READY, doc)
    return Claim(ClaimOutcome.DONE, doc)
