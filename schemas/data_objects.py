"""The data objects a dataset version is made of: what ingest measured when it cut the version, what the
TrainingRequest carries, what the trainer reads and what the run record says it read.

A version is a snapshot: each data object by its name (relative to the dataset folder, the rule of
schemas/dataset_layout.py), its generation and its size. Cloud Storage keeps a generation's bytes immutable, so
reading `name` at `generation` is the object the version measured, whatever lands or is rewritten afterwards.

The list's digest (`objects_digest`) is SHA-256 over one JSON line `[name, generation, size]` per object, in name
order (the order Cloud Storage lists names in). The list itself travels with the request while its compact JSON is
at most INLINE_LIST_BYTES (1,365 objects named like `part-00000.csv`, 728 with Spark-style partition names); past
that the request carries the digest alone and the trainer re-lists the folder, keeping the run only if what it finds
has the same digest (see docs/ingest.md "A dataset version is a snapshot"). Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from schemas import json_text
from schemas.errors import SchemaError
from schemas.fields import Reader, names_of

INLINE_LIST_BYTES = 64 * 1024
"""The most a version's object list may take as compact JSON ([[name, generation, size], ...]) to travel inline: it
rides in the TrainingRequest (at most 256 KiB, schemas/training_request.py MAX_MESSAGE_BYTES), in the dataset
version and run documents (Firestore: 1 MiB each) and as one trainer argument (Linux takes at most 128 KiB per
argument, MAX_ARG_STRLEN)."""
DIGEST_CHARS = 64
MAX_NAME_CHARS = 1024
"""Cloud Storage object names are at most 1,024 bytes."""


@dataclass(frozen=True)
class DataObject:
    name: str
    """Name relative to the dataset folder (gs://BUCKET/PREFIX/ + name is the object)."""
    generation: str
    """The generation measured (decimal text, as Cloud Storage gives it); "" when unknown (a local file)."""
    size: int
    """Bytes."""

    def line(self) -> bytes:
        """This object's line in the list's digest."""
        return json.dumps([self.name, self.generation, self.size]).encode() + b"\n"


class ListDigest:
    """The digest of a list fed one object at a time, in name order (constant memory: ingest's paged listing)."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()

    def add(self, obj: DataObject) -> None:
        self._sha.update(obj.line())

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


def objects_digest(objects: Iterable[DataObject]) -> str:
    """The digest of a list of data objects (sorted by name here, so any order gives the same digest)."""
    digest = ListDigest()
    for obj in sorted(objects, key=lambda o: o.name):
        digest.add(obj)
    return digest.hexdigest()


def encode_objects(objects: Iterable[DataObject]) -> str:
    """The compact JSON of a list, [[name, generation, size], ...]: the trainer's --data-objects argument."""
    return json.dumps([[o.name, o.generation, o.size] for o in objects], separators=(",", ":"))


def entry_bytes(obj: DataObject) -> int:
    """What one object's entry takes in encode_objects' output (without the comma between entries)."""
    return len(encode_objects([obj]).encode()) - 2


def decode_objects(text: str, field: str = "--data-objects") -> tuple[DataObject, ...]:
    """encode_objects' output back into objects; SchemaError naming `field` when it is not that."""
    try:
        data = json_text.loads(text)
    except json_text.JsonTextError as exc:
        raise SchemaError(f"is not JSON ({exc}); expected [[name, generation, size], ...]", field=field) from exc
    if not isinstance(data, list):
        raise SchemaError("expected a JSON list [[name, generation, size], ...]", field=field)
    objects = []
    for i, item in enumerate(data):
        ok = (
            isinstance(item, list)
            and len(item) == 3
            and isinstance(item[0], str)
            and isinstance(item[1], str)
            and isinstance(item[2], int)
            and not isinstance(item[2], bool)
        )
        if not ok:
            raise SchemaError(f"expected [name, generation, size], got {str(item)[:80]}", field=f"{field}[{i}]")
        objects.append(_checked(DataObject(item[0], item[1], item[2]), f"{field}[{i}]"))
    return tuple(objects)


def parse_data_objects(r: Reader, key: str) -> tuple[DataObject, ...]:
    """A list of {"name", "generation", "size"} objects at r[key] (absent: empty)."""
    value = r.data.get(key)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise SchemaError(f"expected a list of objects, got {type(value).__name__}", field=r._name(key))
    objects = []
    for i, item in enumerate(value):
        o = Reader(item, f"{r._name(key)}[{i}]").only(names_of(DataObject))
        obj = DataObject(
            name=o.string("name", max_len=MAX_NAME_CHARS),
            generation=o.string("generation", "", max_len=32),
            size=o.integer("size", 0, minimum=0),
        )
        objects.append(_checked(obj, o.path))
    return tuple(objects)


def _checked(obj: DataObject, field: str) -> DataObject:
    if not obj.name or obj.name.startswith("/") or ".." in obj.name.split("/"):
        raise SchemaError(f"{obj.name!r} is not a name relative to the dataset folder", field=field)
    if obj.generation and not obj.generation.isdigit():
        raise SchemaError(f"generation {obj.generation!r} is not a decimal number", field=field)
    if obj.size < 0:
        raise SchemaError(f"size {obj.size} is negative", field=field)
    return obj


def read_digest(r: Reader, key: str) -> str:
    """An objects digest at r[key]: "" or 64 lowercase hex characters."""
    value = r.string(key, "", max_len=DIGEST_CHARS)
    if value and (len(value) != DIGEST_CHARS or any(c not in "0123456789abcdef" for c in value)):
        raise SchemaError(
            f"expected {DIGEST_CHARS} lowercase hex characters (SHA-256), got {value!r}", field=r._name(key)
        )
    return value


@dataclass(frozen=True)
class DataRead:
    """What a run's trainer read: the run record's `data_read` (schemas/run_record.py) and metrics.json's `data`."""

    object_count: int
    total_bytes: int
    objects_digest: str
    """objects_digest() of what was read."""
    source: str
    """READ_SOURCES: "request" (the list the request carried, read at its generations), "digest" (the folder
    re-listed and found to have the request's digest) or "listing" (a request with no snapshot: the folder as
    listed when the trainer started, read at the generations listed)."""
    objects: tuple[DataObject, ...] = ()
    """The objects read, while their list fits INLINE_LIST_BYTES; () past that (the digest names them)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "object_count": self.object_count,
            "total_bytes": self.total_bytes,
            "objects_digest": self.objects_digest,
            "source": self.source,
            "objects": [{"name": o.name, "generation": o.generation, "size": o.size} for o in self.objects],
        }


READ_SOURCES = ("request", "digest", "listing")


def data_read(objects: tuple[DataObject, ...], source: str) -> DataRead:
    """The DataRead of these objects (the list kept only when it fits INLINE_LIST_BYTES)."""
    fits = len(encode_objects(objects).encode()) <= INLINE_LIST_BYTES
    return DataRead(
        object_count=len(objects),
        total_bytes=sum(o.size for o in objects),
        objects_digest=objects_digest(objects),
        source=source,
        objects=objects if fits else (),
    )


def parse_data_read(r: Reader) -> DataRead:
    return DataRead(
        object_count=r.integer("object_count", minimum=0),
        total_bytes=r.integer("total_bytes", minimum=0),
        objects_digest=read_digest(r, "objects_digest"),
        source=r.string("source", choices=READ_SOURCES),
        objects=parse_data_objects(r, "objects"),
    )


__all__ = [
    "DIGEST_CHARS",
    "INLINE_LIST_BYTES",
    "READ_SOURCES",
    "DataObject",
    "DataRead",
    "ListDigest",
    "data_read",
    "decode_objects",
    "encode_objects",
    "entry_bytes",
    "objects_digest",
    "parse_data_objects",
    "parse_data_read",
    "read_digest",
]
