"""Documents an instance read or wrote a moment ago, each with Firestore's update time of that version, so the next
change to one is one conditional Commit instead of a transaction (begin, read, commit: three calls).

A conditional Commit on a copy kept here is the same as a transaction that read that copy: Firestore applies it only
if the document is still the version of that update time (or, for a copy known to be absent, only if none exists).
Anything else is decided in a transaction on the stored document, as before: no copy, or one older than KNOWN_FOR_S,
a rule that writes nothing on the copy (it may be stale: the stored document decides), or a Commit refused because
another writer came between.

The ingest adapter keeps the version it claims and the dataset document it read with the outbox, so a delivery's
writes after it published (the version's outcome, the dataset's status) cost two calls, not six, while the dispatcher
works on the same emulator or database. functions/gcp/unit_of_work.py does the same for runs, with their records and
the rate-limit slot that rides in a claim's Commit.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from functions.errors import as_transient
from functions.gcp.firestore_tx import Doc, changed_paths, in_transaction

R = TypeVar("R")

KNOWN_FOR_S = 30.0
"""How long a copy is trusted as the precondition of the next change (a refused Commit costs one call)."""
KNOWN_KEPT = 256
"""How many copies are kept (the most recent)."""


@dataclass(frozen=True)
class Copy:
    doc: Doc | None
    """The document as it stood; None: known to be absent."""
    update_time: Any
    """Firestore's update time of that version (None when absent)."""
    at: float


class KnownDocuments:
    """An identity map of document path -> Copy, shared by the threads of one instance."""

    def __init__(self) -> None:
        self._copies: OrderedDict[str, Copy] = OrderedDict()
        self._lock = threading.Lock()

    def keep(self, path: str, doc: Doc | None, update_time: Any) -> None:
        """The document as it now stands (doc None and update_time None: known absent; doc with no update time:
        unknown, forgotten)."""
        with self._lock:
            if doc is not None and update_time is None:
                self._copies.pop(path, None)
                return
            self._copies[path] = Copy(doc, update_time, time.monotonic())
            self._copies.move_to_end(path)
            while len(self._copies) > KNOWN_KEPT:
                self._copies.popitem(last=False)

    def take(self, path: str) -> Copy | None:
        """The copy, if fresh, handed over: forgotten here until whoever writes the document keeps the new one."""
        with self._lock:
            copy = self._copies.pop(path, None)
        if copy is None or time.monotonic() - copy.at >= KNOWN_FOR_S:
            return None
        return copy

    def change(self, client: Any, ref: Any, change: Callable[[Doc | None], tuple[Doc | None, R]]) -> R:
        """change(current document or None) -> (document to write or None, result), applied atomically: one
        conditional Commit on a fresh copy kept here when the rule writes on it, else in a transaction."""
        copy = self.take(ref.path)
        if copy is not None:
            new, result = change(copy.doc)
            if new is not None and self._commit(client, ref, copy, new):
                return result
        return in_transaction(client, ref, change, stored=lambda doc, when: self.keep(ref.path, doc, when))

    def _commit(self, client: Any, ref: Any, copy: Copy, new: Doc) -> bool:
        """Write new over the copy on the condition that the stored document is still it; whether it was written."""
        from google.api_core import exceptions as gexc

        from functions.gcp import firestore_writes

        if copy.doc is None:
            write = firestore_writes.create_write(ref, new)
        else:
            paths = changed_paths(copy.doc, new)
            if not paths:
                return False
            write = firestore_writes.update_write(ref, paths, copy.update_time)
        try:
            results = firestore_writes.commit(client, [write])
        except (gexc.FailedPrecondition, gexc.NotFound, gexc.Aborted, gexc.Conflict):
            return False
        except Exception as exc:
            raise as_transient(exc, f"Firestore commit of {ref.path}") from exc
        self.keep(ref.path, new, results[0].update_time)
        return True
