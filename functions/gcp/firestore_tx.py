"""The one way Landfall's Firestore adapters change a document: read it and write its successor in a transaction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from functions.errors import TransientError, as_transient
from functions.records.run_rules import Doc


def in_transaction(client: Any, ref: Any, change: Callable[[Doc | None], tuple[Doc | None, Any]]) -> Any:
    """Run change(current document or None) in a transaction; it returns (document to write or None, result).

    Contention retries inside the client (10 attempts); what still fails is raised, transient errors as such.
    """
    from google.cloud import firestore

    @firestore.transactional
    def body(transaction: Any) -> Any:
        snapshot = ref.get(transaction=transaction)
        new, result = change(snapshot.to_dict() if snapshot.exists else None)
        if new is not None:
            transaction.set(ref, new)
        return result

    try:
        return body(client.transaction(max_attempts=10))
    except ValueError as exc:
        if "Failed to commit transaction" not in str(exc):
            raise
        # Contention outlasted the client's attempts (it raises a bare ValueError): another delivery is writing the
        # same document, so this one is retried like any other busy resource, never dropped as unexpected.
        raise TransientError(f"Firestore transaction on {ref.path} kept colliding ({exc}); will retry") from exc
    except Exception as exc:
        raise as_transient(exc, f"Firestore transaction on {ref.path}") from exc


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
