"""A request the dispatcher refuses: its run REJECTED with the failure reason and why. A message that is no valid
TrainingRequest is REJECTED too, as a run named from what it carries, when it is readable enough to name one."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

from functions.dispatch.deps import DispatchDeps
from functions.dispatch.outcomes import Outcome, Said
from functions.envelopes import PubSubMessage
from schemas import json_text
from schemas.fields import INT64_MAX, INT64_MIN
from schemas.run_record import RunError, RunState, new_run
from schemas.training_request import run_id_for

log = logging.getLogger("landfall.dispatch")

KEPT_FIELD_CHARS = 16_000
"""The largest field of an invalid request a REJECTED run keeps as sent (as JSON text); a larger one is kept cut.
Twenty such fields stay far below Firestore's 1 MiB document, which a message of up to Pub/Sub's 10 MB could pass:
the write then failed, and the message was retried until dead-lettered instead of acknowledged with its reason."""

INVALID_REQUEST = "invalid-request"


def reject(run_id: str, code: str, reason: str, deps: DispatchDeps) -> Outcome:
    log.warning("run %s rejected (%s): %s", run_id, code, reason)
    deps.store.transition(
        run_id,
        RunState.REJECTED,
        now=deps.now(),
        detail=reason,
        change=lambda r: replace(r, error=RunError(code, reason)),
    )
    return Outcome(Said.REJECTED, code)


def reject_unreadable(message: PubSubMessage, reason: str, deps: DispatchDeps) -> Outcome:
    """A message that is not a valid TrainingRequest: a REJECTED run when it is readable enough to name one."""
    try:
        raw = json_text.loads(message.data)
    except json_text.JsonTextError:
        raw = None
    if not isinstance(raw, dict):
        log.error("unreadable TrainingRequest (message %s) acknowledged without a run: %s", message.message_id, reason)
        return Outcome(Said.DROPPED, "unreadable")
    key = raw.get("idempotency_key")
    key = key if isinstance(key, str) and key.strip() else f"pubsub-message:{message.message_id}"
    run_id = run_id_for(key)
    kept = {k: storable(raw[k]) for k in list(raw)[:20]}
    deps.store.create_if_absent(
        new_run(
            run_id,
            kept,
            now=deps.now(),
            state=RunState.REJECTED,
            detail=reason,
            error=RunError(INVALID_REQUEST, reason),
        )
    )
    log.warning("run %s rejected: %s", run_id, reason)
    return Outcome(Said.REJECTED, INVALID_REQUEST)


def storable(value: object) -> object:
    """A field of an invalid request as the run record keeps it: as sent where Firestore can hold it and it is not
    large, else its JSON text, cut (integers past 64 bits and nesting past Firestore's 20 levels make the whole write
    fail, and so does a document past 1 MiB)."""
    text = json.dumps(value, default=str)
    if _fits_firestore(value, depth=1) and len(text) <= KEPT_FIELD_CHARS:
        return value
    return text if len(text) <= 1000 else f"{text[:1000]}... ({len(text)} characters)"


def _fits_firestore(value: object, depth: int) -> bool:
    if isinstance(value, dict):
        return depth < 20 and all(_fits_firestore(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return depth < 20 and all(_fits_firestore(v, depth + 1) for v in value)
    return not isinstance(value, int) or INT64_MIN <= value <= INT64_MAX


__all__ = ["KEPT_FIELD_CHARS", "reject", "reject_unreadable", "storable"]
