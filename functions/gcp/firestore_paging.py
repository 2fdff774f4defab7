"""Reading every document a Firestore query matches, a page at a time, in document-id order (so a page boundary is
stable while documents change), with client errors translated at the boundary."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from functions.errors import as_transient


def paged_documents(collection: Any, where: Any, *, page_size: int) -> Iterator[dict[str, Any]]:
    """Every document of `collection` matching the filter `where`, as dicts; raises TransientError when Firestore
    does not answer (the caller's pass is retried or picks up on its next tick)."""
    return (snapshot.to_dict() for snapshot in paged_snapshots(collection, where, page_size=page_size))


def paged_snapshots(collection: Any, where: Any, *, page_size: int) -> Iterator[Any]:
    """paged_documents, as the client's snapshots (their `id` and `to_dict()`)."""
    query = collection.where(filter=where).order_by("__name__").limit(page_size)
    last = None
    while True:
        try:
            page = list((query.start_after(last) if last is not None else query).stream())
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        yield from page
        if len(page) < page_size:
            return
        last = page[-1]
