"""The one way Landfall's Firestore adapters change a document: read it and write its successor in a transaction."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from functions.errors import TransientError, as_transient

if TYPE_CHECKING:  # the run rules (and the run record schema) are not this adapter's to import at run time
    from functions.records.run_rules import Doc

ATTEMPTS = 10
BACKOFF_CAP_S = 2.0

R = TypeVar("R")


def in_transaction(
    client: Any,
    ref: Any,
    change: Callable[[Doc | None], tuple[Doc | None, R]],
    *,
    attempts: int = ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
) -> R:
    """Run change(current document or None) in a transaction; it returns (document to write or None, result).

    Each attempt is one transaction; an attempt that collides (aborted, or the emulator's lock timeout) is tried
    again after a random pause that doubles up to BACKOFF_CAP_S ("full jitter"). The client's own retries start
    again at once, so several deliveries writing one run (job events arriving together, a reconcile pass) collided
    in lockstep until every one had used its attempts. What still fails is raised, transient errors as such.
    """
    from google.api_core import exceptions as gexc
    from google.cloud import firestore

    @firestore.transactional
    def body(transaction: Any) -> R:
        snapshot = ref.get(transaction=transaction)
        new, result = change(snapshot.to_dict() if snapshot.exists else None)
        if new is not None:
            transaction.set(ref, new)
        return result

    last: Exception | None = None
    for attempt in range(attempts):
        if attempt:
            sleep(random.uniform(0, min(BACKOFF_CAP_S, 0.05 * 2**attempt)))
        try:
            result: R = body(client.transaction(max_attempts=1))  # firestore.transactional's call is unannotated
            return result
        except ValueError as exc:
            if "Failed to commit transaction" not in str(exc):
                raise
            last = exc
        except (gexc.Aborted, gexc.Conflict) as exc:
            last = exc
        except Exception as exc:
            raise as_transient(exc, f"Firestore transaction on {ref.path}") from exc
    # Contention outlasted every attempt: another delivery is writing the same document, so this one is retried like
    # any other busy resource, never dropped as unexpected.
    raise TransientError(
        f"Firestore transaction on {ref.path} kept colliding ({attempts} attempts, last: {last}); will retry"
    ) from last


def create_if_absent(ref: Any, doc: Doc) -> bool:
    """Create the document unless one exists (Firestore create(): one caller wins a race); False when it existed."""
    from google.api_core.exceptions import Conflict

    try:
        ref.create(doc)
    except Conflict:
        return False
    except Exception as exc:
        raise as_transient(exc, f"Firestore create of {ref.path}") from exc
    return True
