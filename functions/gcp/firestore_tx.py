"""The one way Landfall's Firestore adapters change a document: read it and write its successor in a transaction."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from functions.errors import TransientError, as_transient

Doc = dict[str, Any]
"""A stored document as the client libraries read and write it."""
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
    stored: Callable[[Doc | None, Any], None] | None = None,
) -> R:
    """Run change(current document or None) in a transaction; it returns (document to write or None, result).
    After the commit, `stored` (if given) is told the document as it now is and its update time (None, None when there
    is none), for a later conditional Commit (functions/gcp/unit_of_work.py).

    Each attempt is one transaction; an attempt that collides (aborted, or the emulator's lock timeout) is tried
    again after a random pause that doubles up to BACKOFF_CAP_S ("full jitter"). The client's own retries start
    again at once, so several deliveries writing one run (job events arriving together, a reconcile pass) collided
    in lockstep until every one had used its attempts. What still fails is raised, transient errors as such.
    """
    from google.cloud import firestore

    after: list[Any] = []  # the attempt that committed: its transaction, the document now and when it was read

    @firestore.transactional
    def body(transaction: Any) -> R:
        snapshot = ref.get(transaction=transaction)
        current = snapshot.to_dict() if snapshot.exists else None
        new, result = change(current)
        write_successor(transaction, ref, current, new)
        after[:] = [transaction, current if new is None else new, snapshot.update_time]
        return result

    run: Callable[[Any], R] = body  # firestore.transactional is unannotated
    result = retried(client, run, ref.path, attempts=attempts, sleep=sleep)
    if stored is not None and after:
        transaction, doc, read_at = after
        written = getattr(transaction, "write_results", None) or ()
        when = written[0].update_time if written else read_at
        stored(doc if when is not None else None, when)
    return result


def write_successor(transaction: Any, ref: Any, current: Doc | None, new: Doc | None) -> bool:
    """In the transaction that read `current`: create `new`, or update the fields that changed (None: write nothing).
    Whether it added a write."""
    if new is not None and current is None:
        transaction.set(ref, new)
        return True
    if new is not None and current is not None:
        fields = changed_fields(current, new)
        if fields:
            transaction.update(ref, fields)
            return True
    return False


def retried(
    client: Any,
    body: Callable[[Any], R],
    what: str,
    *,
    attempts: int = ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
) -> R:
    """body(transaction) run in a fresh transaction per attempt (a `firestore.transactional` function); an attempt
    that collides is tried again after a random pause that doubles up to BACKOFF_CAP_S; what still fails is raised,
    transient errors as such. `what` names the documents for the error."""
    from google.api_core import exceptions as gexc

    last: Exception | None = None
    for attempt in range(attempts):
        if attempt:
            sleep(random.uniform(0, min(BACKOFF_CAP_S, 0.05 * 2**attempt)))
        try:
            return body(client.transaction(max_attempts=1))  # firestore.transactional's call is unannotated
        except ValueError as exc:
            if "Failed to commit transaction" not in str(exc):
                raise
            last = exc
        except (gexc.Aborted, gexc.Conflict) as exc:
            last = exc
        except Exception as exc:
            raise as_transient(exc, f"Firestore transaction on {what}") from exc
    # Contention outlasted every attempt: another delivery is writing the same document, so this one is retried like
    # any other busy resource, never dropped as unexpected.
    raise TransientError(
        f"Firestore transaction on {what} kept colliding ({attempts} attempts, last: {last}); will retry"
    ) from last


def create_if_absent(client: Any, ref: Any, doc: Doc) -> bool:
    """Create the document unless one exists (Firestore create(): one caller wins a race); False when it existed."""
    return created(client, ref, doc) is not None


def created(client: Any, ref: Any, doc: Doc) -> Any | None:
    """Create the document unless one exists (Firestore create(): one caller wins a race), encoded straight into
    Firestore's messages (functions/gcp/firestore_writes.py); its update time, or None when it existed."""
    from google.api_core.exceptions import Conflict

    from functions.gcp import firestore_writes

    try:
        return firestore_writes.create(client, ref, doc)
    except Conflict:
        return None
    except Exception as exc:
        raise as_transient(exc, f"Firestore create of {ref.path}") from exc


def changed_fields(current: Doc, new: Doc) -> dict[str, Any]:
    """changed_paths as the library's update takes them: each path as its API form (dotted, quoted where a key needs
    it)."""
    from google.cloud.firestore_v1.field_path import FieldPath

    return {FieldPath(*path).to_api_repr(): value for path, value in changed_paths(current, new).items()}


def changed_paths(current: Doc, new: Doc) -> dict[tuple[str, ...], Any]:
    """The fields of `new` that differ from `current`, as a Firestore update: a map present in both is compared field
    by field (its changed fields become dotted paths, quoted where a key needs it), a field `new` lacks is deleted.

    Writing only these instead of the whole document is what a transition costs: encoding a document for Firestore is
    most of a write's CPU, and a run's plan, request, fallbacks and earlier history do not change when its state does.
    The read in the same transaction makes the update exact: nothing else changed the document in between, so
    `current` plus these fields is `new`. Values compare with their types (an integer is not rewritten as the float
    it equals).
    """
    from google.cloud import firestore

    fields: dict[tuple[str, ...], Any] = {}

    def walk(old: Doc, now: Doc, prefix: tuple[str, ...]) -> None:
        for key, value in now.items():
            path = (*prefix, key)
            if key not in old:
                fields[path] = value
            elif isinstance(value, dict) and isinstance(old[key], dict) and value:
                walk(old[key], value, path)
            elif not same_value(old[key], value):
                fields[path] = value
        for key in old:
            if key not in now:
                fields[(*prefix, key)] = firestore.DELETE_FIELD

    walk(current, new, ())
    return fields


def same_value(a: Any, b: Any) -> bool:
    """Equal and of the same kind all the way down (Firestore stores 1 and 1.0, and True and 1, apart).

    Most values compared are unchanged: equal (compared in C), and written the same (their reprs, which tell 1, 1.0
    and True apart, match) is settled at once; only what is equal but written differently (other kinds, another key
    order, the library's datetimes) is walked."""
    if a is b:
        return True
    if a != b:
        return False
    if type(a) is type(b) and repr(a) == repr(b):
        return True
    return _same_walked(a, b)


def _same_walked(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool) or isinstance(a, float) or isinstance(b, float):
        return type(a) is type(b) and a == b
    return bool(a == b) and isinstance(a, type(b)) | isinstance(b, type(a))
