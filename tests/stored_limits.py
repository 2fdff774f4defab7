"""What Firestore takes in one document (https://cloud.google.com/firestore/quotas#limits), as a check tests run on
the documents Landfall writes: the fakes store whatever they are given, Firestore refuses these."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from schemas.record_bounds import DOCUMENT_LIMIT_BYTES, document_size, value_size

MAX_DEPTH = 20
"""Maximum depth of fields in a map or array."""
MAX_FIELD_BYTES = DOCUMENT_LIMIT_BYTES - 89
"""Maximum size of a field value."""
MAX_FIELD_NAME_BYTES = 1_500


def _walk(value: Any, path: str, depth: int, in_array: bool) -> Iterator[str]:
    if isinstance(value, dict | list):
        if depth > MAX_DEPTH:
            yield f"{path}: nested {depth} deep (Firestore takes {MAX_DEPTH})"
            return
        if isinstance(value, list):
            if in_array:
                yield f"{path}: an array directly inside an array"
            for i, item in enumerate(value):
                yield from _walk(item, f"{path}[{i}]", depth + 1, True)
            return
        for key, item in value.items():
            if not isinstance(key, str) or len(key.encode("utf-8", "replace")) > MAX_FIELD_NAME_BYTES:
                yield f"{path}: a field name Firestore refuses ({str(key)[:40]!r})"
            yield from _walk(item, f"{path}.{key}", depth + 1, False)
        return
    if isinstance(value, float) and not math.isfinite(value):
        yield f"{path}: {value} (no reader of the document takes it)"
    elif isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        yield f"{path}: an integer past 64 bits"
    elif isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            yield f"{path}: text that is not Unicode"
    elif value is not None and not isinstance(value, bool | int | float | bytes | datetime):
        yield f"{path}: a {type(value).__name__}"


def firestore_problems(path: str, doc: dict[str, Any]) -> list[str]:
    """Why Firestore would refuse `doc` at `path` (collection/id), or [] when it takes it."""
    problems = list(_walk(doc, path, 0, False))
    problems += [
        f"{path}.{k}: a value of {value_size(v):,} bytes" for k, v in doc.items() if value_size(v) > MAX_FIELD_BYTES
    ]
    if document_size(path, doc) >= DOCUMENT_LIMIT_BYTES:
        problems.append(f"{path}: {document_size(path, doc):,} bytes")
    return problems
