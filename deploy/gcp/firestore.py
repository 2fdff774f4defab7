"""The Firestore composite indexes the CLI's queries need, read from deploy/firestore.indexes.json.

The file is in the Firebase CLI's format (`{"indexes": [{"collectionGroup", "queryScope", "fields": [{"fieldPath",
"order"}]}], "fieldOverrides": []}`), so `firebase deploy --only firestore:indexes` could read it too; the deployer
creates each index with `gcloud firestore indexes composite create`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ORDERS = ("ASCENDING", "DESCENDING")
SCOPES = ("COLLECTION", "COLLECTION_GROUP")


class IndexFileError(ValueError):
    """The index file is malformed; the message names the entry."""


@dataclass(frozen=True)
class CompositeIndex:
    collection_group: str
    query_scope: str
    fields: tuple[tuple[str, str], ...]
    """(field path, ASCENDING | DESCENDING), in index order."""

    def field_configs(self) -> list[str]:
        return [f"--field-config=field-path={path},order={order.lower()}" for path, order in self.fields]

    def matches(self, listed: dict[str, Any]) -> bool:
        """True when an index as `gcloud firestore indexes composite list --format=json` prints it is this one
        (Firestore appends `__name__` to every index; it is ignored here)."""
        name = str(listed.get("name", ""))
        fields = tuple(
            (str(f.get("fieldPath")), str(f.get("order")))
            for f in listed.get("fields", [])
            if f.get("fieldPath") != "__name__"
        )
        return (
            f"/collectionGroups/{self.collection_group}/" in name
            and fields == self.fields
            and listed.get("queryScope", "COLLECTION") == self.query_scope
        )


def load_indexes(path: Path) -> tuple[CompositeIndex, ...]:
    data = json.loads(path.read_text())
    indexes = []
    for i, entry in enumerate(data.get("indexes", [])):
        where = f"{path.name}: indexes[{i}]"
        fields = tuple((str(f.get("fieldPath", "")), str(f.get("order", ""))) for f in entry.get("fields", []))
        index = CompositeIndex(
            str(entry.get("collectionGroup", "")), str(entry.get("queryScope", "COLLECTION")), fields
        )
        if not index.collection_group or len(fields) < 2:
            raise IndexFileError(
                f"{where} needs a collectionGroup and at least two fields (one field is indexed automatically)"
            )
        if index.query_scope not in SCOPES or any(not p or o not in ORDERS for p, o in fields):
            raise IndexFileError(
                f"{where}: queryScope must be one of {SCOPES} and each field a fieldPath with an "
                f"order of {ORDERS}, found {entry}"
            )
        indexes.append(index)
    return tuple(indexes)


def listed_indexes(stdout: str) -> list[dict[str, Any]]:
    try:
        listed = json.loads(stdout or "[]")
    except json.JSONDecodeError:
        return []
    return listed if isinstance(listed, list) else []
