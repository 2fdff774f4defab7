"""Firestore adapter for capacity events (schemas/capacity_event.py): one document per ended job or refused call,
written whole under its id (a repeated delivery writes the same document), read newest first by one query on `at`
(its automatic single-field index), kept for KEPT_FOR_S by the instance: the capacity the machines met changes as
jobs end, minutes apart, and a burst of requests plans on one read."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from functions.errors import as_transient
from schemas.capacity_event import CAPACITY_EVENTS_READ, CapacityEvent, parse_capacity_event
from schemas.errors import SchemaError

log = logging.getLogger("landfall.capacity")

KEPT_FOR_S = 60.0
"""How long the newest events, once read, are planned on without asking again."""


class CapacityStore:
    def __init__(self, client: Any, collection: str) -> None:
        self._client = client
        self._collection = collection
        self._kept: tuple[float, int, tuple[CapacityEvent, ...]] | None = None
        self._lock = threading.Lock()

    def record(self, event: CapacityEvent) -> None:
        """Write the event under its id (the same event written again changes nothing)."""
        try:
            self._client.collection(self._collection).document(event.event_id).set(event.to_document())
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc

    def newest(self, limit: int = CAPACITY_EVENTS_READ) -> tuple[CapacityEvent, ...]:
        """The `limit` newest events (by `at`); an event that does not read is left out and logged. Read less than
        KEPT_FOR_S ago: the same tuple as then (a caller may keep what it made of it while it is the same)."""
        with self._lock:
            kept = self._kept
        if kept is not None and kept[1] == limit and time.monotonic() - kept[0] < KEPT_FOR_S:
            return kept[2]
        from google.cloud import firestore

        from functions.gcp.firestore_reads import query_documents

        query = self._client.collection(self._collection).order_by("at", direction=firestore.Query.DESCENDING)
        try:
            docs = query_documents(query.limit(limit))
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        found = tuple(e for e in map(_readable, docs) if e is not None)
        with self._lock:
            self._kept = (time.monotonic(), limit, found)
        return found

    def forget(self) -> None:
        """Read again on the next call (tests, and a process that just wrote events it plans on)."""
        with self._lock:
            self._kept = None


def _readable(doc: dict[str, Any]) -> CapacityEvent | None:
    try:
        return parse_capacity_event(doc)
    except SchemaError as exc:
        log.warning("capacity event %s left out of planning: it does not read (%s)", doc.get("event_id"), exc)
        return None
