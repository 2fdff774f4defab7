"""Pure rules for changing a run document: forward-only states, history, and the submission claim.

The Firestore adapter (runs_store.py) applies these inside transactions; tests exercise them without a server.
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from functions.records.leases import Claim, ClaimOutcome, Lease, held_by_other
from schemas.run_record import RunState, can_move, parse_state
from schemas.times import format_timestamp

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


def submission_lease(submission: Doc) -> Lease | None:
    """The lease a run's submission record holds (`owner` until `lease_until`), if any."""
    if not submission.get("lease_until"):
        return None
    return Lease(str(submission.get("owner", "")), str(submission["lease_until"]))


def claimed(doc: Doc, *, owner: str, now: datetime, lease_seconds: int) -> Claim[Doc]:
    """Decide whether `owner` may submit the run's job, and the document that records its lease."""
    state = parse_state(doc["state"])
    submission = dict(doc.get("submission") or {})
    granted = Lease.granted(owner, now=now, seconds=lease_seconds)
    lease = {"owner": granted.owner, "lease_until": granted.until}
    if state == RunState.PLANNED:
        new = transitioned(doc, RunState.SUBMITTING, now=now, detail="claimed for submission",
                           updates={"submission": {**submission, **lease}})
        assert new is not None
        return Claim(ClaimOutcome.CLAIMED, new)
    if state == RunState.SUBMITTING:
        if held_by_other(submission_lease(submission), owner, now):
            return Claim(ClaimOutcome.BUSY, doc)
        new = transitioned(doc, RunState.SUBMITTING, now=now, updates={"submission": {**submission, **lease}})
        assert new is not None
        return Claim(ClaimOutcome.RECOVER, new)
    if state in (RunState.RECEIVED,):
        return Claim(ClaimOutcome.NOT_READY, doc)
    return Claim(ClaimOutcome.DONE, doc)
