"""The write side of the runs collection in one instance: what its deliveries read and wrote of each run (an
identity map, with each document's update time), the decision between one conditional Commit and a transaction, and
the rate-limit slot whose write rides in a claim's Commit (cosmicpython's service_layer/unit_of_work.py: the
handlers say what should change; this commits it).

The runs store and the team ledger store share one UnitOfWork (functions/wiring.py), so a run one of them wrote is
the copy the other's next change is conditional on, without either handing it through the dispatcher.

One conditional Commit on a copy kept here is the same as a transaction that read that copy: the Commit holds only if
the document is still the one of that update time (a precondition Firestore checks). Anything else (no fresh copy,
a step that writes nothing on it, or the Commit refused because another writer came between) is decided in a
transaction on the stored document: begin, read, commit.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from functions.errors import as_transient
from functions.gcp.firestore_reads import get_document
from functions.gcp.firestore_tx import Doc, changed_paths, created, retried, write_successor
from functions.records import run_rules
from functions.records.run_rules import Step
from schemas.run_record import RunRecord, parse_run_record

T = TypeVar("T")

WithOther = Callable[[RunRecord | None, Doc | None], tuple[RunRecord | None, Doc | None, T] | None]
"""Given the run and another document as a transaction read them (None when absent; the other None too when the
transaction reads none): the run to write, the other document to write (None: leave it as it is) and the result; or
None to write nothing and answer None."""

KNOWN_FOR_S = 30.0
"""How long a run read or written here is kept, as it stood, for the next change to it to be one conditional Commit."""
KNOWN_KEPT = 64
"""How many such runs are kept (the most recent)."""


@dataclass(frozen=True)
class Seen:
    """A run document as this instance last read or wrote it, with Firestore's update time of that version."""

    doc: Doc
    update_time: Any
    at: float
    record: RunRecord | None = None
    """The record the document was written from (else it is read from doc when asked)."""

    def run(self) -> RunRecord:
        return self.record if self.record is not None else parse_run_record(self.doc)


class Riding(ABC):
    """Writes to another document that go in a run's own Commit, after the run's (all or none): the rate-limit slot
    (functions/gcp/rate_limits_store.py RateLimitsStore)."""

    @abstractmethod
    def writes(self, region: str, now: datetime) -> Sequence[Any]:
        """The protobuf Writes taking a slot in region at now."""

    @abstractmethod
    def answered(self, run_id: str, region: str, results: Sequence[Any]) -> None:
        """Those writes' protobuf WriteResults, once the Commit of run_id's claim holding them succeeded."""


SlotRegion = Callable[[object], str | None]
"""Which region's slot rides with a step that answered this result (None: none): the dispatcher's rule
(functions/dispatch/queueing.py slot_region), given by the wiring."""


class UnitOfWork:
    """The runs collection's write side for one instance (its client and collection), shared by the stores that
    write runs. Its entries are per run, and so per delivery: a run's copy is handed over to the change that uses it
    (`seen` forgets it) and the change's result kept in its place, while the delivery's claim makes the run its own;
    the slot taken with a claim is handed to the limiter for that claim's delivery (`Riding.answered`)."""

    def __init__(
        self,
        client: Any,
        runs_collection: str,
        *,
        slots: Riding | None = None,
        slot_region: SlotRegion | None = None,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.client = client
        self.collection = runs_collection
        self._seen: OrderedDict[str, Seen] = OrderedDict()
        self._slots = slots if slot_region is not None else None
        self._slot_region = slot_region
        self._now = now
        self._lock = threading.Lock()

    def ref(self, run_id: str) -> Any:
        return self.client.collection(self.collection).document(run_id)

    # The identity map -------------------------------------------------------------------------------------------

    def keep(self, run_id: str, doc: Doc | None, update_time: Any, record: RunRecord | None = None) -> None:
        """The run's document as it now stands (None: unknown, forgotten) and the record it was written from."""
        with self._lock:
            if doc is None or update_time is None:
                self._seen.pop(run_id, None)
                return
            self._seen[run_id] = Seen(doc, update_time, time.monotonic(), record)
            self._seen.move_to_end(run_id)
            while len(self._seen) > KNOWN_KEPT:
                self._seen.popitem(last=False)

    def forget(self, run_id: str) -> None:
        """Another writer is about to change the run: its copy here would only be refused."""
        with self._lock:
            self._seen.pop(run_id, None)

    def seen(self, run_id: str) -> Seen | None:
        """The run as last read or written here, if that was less than KNOWN_FOR_S ago, handed over (forgotten here:
        whoever writes it next keeps the new version)."""
        with self._lock:
            seen = self._seen.pop(run_id, None)
        if seen is None or time.monotonic() - seen.at >= KNOWN_FOR_S:
            return None
        return seen

    # Reads and writes ---------------------------------------------------------------------------------------------

    def read(self, run_id: str) -> RunRecord | None:
        """One GetDocument; the run is kept, its update time the precondition of the next change."""
        try:
            stored, update_time = get_document(self.client, self.ref(run_id))
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        if stored is None:
            return None
        found = parse_run_record(stored)
        self.keep(run_id, stored, update_time, found)
        return found

    def create(self, run: RunRecord) -> tuple[RunRecord, bool]:
        """Firestore's create(): one caller wins a race, in one call; a run that exists is read back (and kept: a
        redelivery then claims it in one conditional Commit)."""
        doc = run.to_document()
        when = created(self.client, self.ref(run.run_id), doc)
        if when is not None:
            self.keep(run.run_id, doc, when, run)
            return run, True
        existing = self.read(run.run_id)
        if existing is None:  # deleted between the two calls: decide it in a transaction
            return self.change(run.run_id, run_rules.create_if_absent(run))
        return existing, False

    def change(self, run_id: str, step: Step[T]) -> T:
        """Run one rule step on the run and write what it returns, atomically: one conditional Commit on the copy
        kept here (with the rate-limit slot the step's result wants, if any), else a transaction."""
        seen = self.seen(run_id)
        if seen is not None:
            new, result = step(seen.run())
            if new is not None and self.commit(run_id, seen, new, result) is not None:
                return result

        def alone(cur: RunRecord | None, _: Doc | None) -> tuple[RunRecord | None, Doc | None, T]:
            new, result = step(cur)
            return new, None, result

        done = self.transaction(run_id, alone)
        assert done is not None, "a step over the run alone always decides"
        return done[0]

    def commit(
        self, run_id: str, seen: Seen, new: RunRecord, result: object, also: Sequence[Any] = ()
    ) -> Sequence[Any] | None:
        """One Commit: the run's changed fields on the condition that it is still `seen`'s version, then `also`
        (protobuf Writes to other documents, each with its own precondition), then the slot the step's result wants.
        The WriteResults of `also` once committed (the run kept as written, the slot's answer handed to the limiter,
        for the claim's delivery to use); None when nothing was written (the run unchanged, or a document changed
        since)."""
        from google.api_core import exceptions as gexc

        from functions.gcp import firestore_writes

        doc = new.to_document()
        paths = changed_paths(seen.doc, doc)
        if not paths:
            return None
        region = self._slot_region(result) if self._slots is not None and self._slot_region is not None else None
        riding: Sequence[Any] = ()
        if region and self._slots is not None and self._now is not None:
            riding = self._slots.writes(region, self._now())
        writes = [firestore_writes.update_write(self.ref(run_id), paths, seen.update_time), *also, *riding]
        try:
            results = firestore_writes.commit(self.client, writes)
        except (gexc.FailedPrecondition, gexc.NotFound, gexc.Aborted, gexc.Conflict):
            return None
        except Exception as exc:
            raise as_transient(exc, f"Firestore write of {self.ref(run_id).path}") from exc
        self.keep(run_id, doc, results[0].update_time, new)
        if riding and self._slots is not None and region:
            self._slots.answered(run_id, region, results[1 + len(also) :])
        return list(results[1 : 1 + len(also)])

    def transaction(
        self,
        run_id: str,
        step: WithOther[T],
        *,
        other: Any | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> tuple[T] | None:
        """step in a transaction over the run and, when given, the document `other` references (a team's ledger),
        tried again while it collides (functions/gcp/firestore_tx.py retried): the run's write first, then the
        other's. (result,), or None when step answered None (nothing written); the run as the transaction left it is
        kept."""
        from google.cloud import firestore

        run_ref = self.ref(run_id)

        @firestore.transactional
        def body(transaction: Any) -> tuple[T] | None:
            refs = [run_ref] if other is None else [run_ref, other]
            snapshots = {s.reference.path: s for s in transaction.get_all(refs)}
            run_snap = snapshots.get(run_ref.path)
            other_snap = None if other is None else snapshots.get(other.path)
            run_doc = run_snap.to_dict() if run_snap is not None and run_snap.exists else None
            other_doc = other_snap.to_dict() if other_snap is not None and other_snap.exists else None
            decided = step(None if run_doc is None else parse_run_record(run_doc), other_doc)
            if decided is None:
                return None
            new_run, new_other, result = decided
            new_doc = None if new_run is None else new_run.to_document()
            wrote = write_successor(transaction, run_ref, run_doc, new_doc)  # the run's write first: write_results[0]
            if other is not None:
                write_successor(transaction, other, other_doc, new_other)
            read_at = None if run_snap is None else run_snap.update_time
            after[:] = [(transaction, run_doc, new_doc, read_at, wrote)]
            return (result,)

        after: list[tuple[Any, Doc | None, Doc | None, Any, bool]] = []
        run: Callable[[Any], tuple[T] | None] = body  # firestore.transactional is unannotated
        what = run_ref.path if other is None else f"{run_ref.path} and {other.path}"
        done = retried(self.client, run, what, sleep=sleep)
        if done is not None and after:
            transaction, read, new, read_at, wrote = after[0]
            if wrote:
                results = getattr(transaction, "write_results", None) or ()
                when = results[0].update_time if results else None
                self.keep(run_id, new if when is not None else None, when)
            else:
                self.keep(run_id, read if read_at is not None else None, read_at)
        return done


__all__ = ["KNOWN_FOR_S", "KNOWN_KEPT", "Riding", "Seen", "SlotRegion", "UnitOfWork", "WithOther"]
