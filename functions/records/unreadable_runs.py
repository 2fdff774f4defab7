"""A stored run whose document the reader refuses, and how a reconcile pass marks a run it could not reconcile.

A store's listing for the reconciler yields such a run in place of the record, so one broken document does not end
the listing; the pass marks it (`reconcile_errors`, schemas/run_record.py) by updating that one field, which needs
only that field to be readable."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from schemas.errors import SchemaError
from schemas.run_record import parse_reconcile_errors, reconcile_errors_after
from schemas.times import format_timestamp

RECONCILE_ERRORS = "reconcile_errors"
"""The run document's field the mark is written to."""


@dataclass(frozen=True)
class UnreadableRun:
    run_id: str
    """The document's id."""
    error: str
    """Why the reader refused it (the SchemaError naming the field)."""


def marked(doc: dict[str, Any], error: str, now: datetime) -> dict[str, Any]:
    """The document with one more failed pass on its mark; a mark that cannot be read itself starts again."""
    try:
        before = None if doc.get(RECONCILE_ERRORS) is None else parse_reconcile_errors(doc[RECONCILE_ERRORS])
    except SchemaError:
        before = None
    return {**doc, RECONCILE_ERRORS: reconcile_errors_after(before, error, format_timestamp(now)).to_dict()}


def unmarked(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The document without its mark; None when it has none (nothing to write)."""
    if RECONCILE_ERRORS not in doc:
        return None
    return {k: v for k, v in doc.items() if k != RECONCILE_ERRORS}


__all__ = ["RECONCILE_ERRORS", "UnreadableRun", "marked", "unmarked"]
