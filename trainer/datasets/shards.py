"""Which files are data, which rank reads which part of them in each epoch, and which records are held out.

A unit is (shard, part). With at least as many shards as processes every shard is one unit; with fewer, each
shard is split into `parts` interleaved row sets (row i belongs to part i % parts) so that every rank still has
data. Units are shuffled per epoch with a generator seeded by (seed, epoch), then dealt round-robin to ranks.
"""

from __future__ import annotations

import math
import posixpath
from dataclasses import dataclass
from pathlib import Path

import torch

from schemas.data_objects import DataObject, DataRead, data_read, objects_digest
from schemas.dataset_layout import is_data_object
from trainer import storage
from trainer.errors import DataError

_MASK = (1 << 64) - 1


@dataclass(frozen=True)
class DataFiles:
    """The files a run reads (gs:// ones as gs://B/NAME#GENERATION: exactly that generation) and what they are."""

    files: list[str]
    read: DataRead


def data_files(uri: str) -> list[str]:
    """The data files under uri as listed now, sorted (see dataset_files)."""
    return dataset_files(uri).files


def dataset_files(uri: str, objects: tuple[DataObject, ...] = (), digest: str = "") -> DataFiles:
    """The data files of the dataset version at uri: with `objects` (the request's snapshot) exactly those, at their
    generations; with only a digest, the folder listed now when its data objects have that digest (a DataError
    when the folder changed since the version was cut); with neither, the folder listed now. Data is what ingest
    counts as data (schemas/dataset_layout.py): _SUCCESS, _MANIFEST.json, landfall.json and any name with a segment
    starting with '_' or '.' are not."""
    if objects:
        ordered = tuple(sorted(objects, key=lambda o: o.name))
        if digest and objects_digest(ordered) != digest:
            raise DataError(uri, f"--data-objects does not have --data-digest={digest}; pass the request's pair")
        files = [storage.versioned(storage.join(uri, o.name), o.generation) for o in ordered]
        return DataFiles(files, data_read(ordered, "request"))
    listed = [
        (file, DataObject(relative_name(uri, file), generation, size))
        for file, generation, size in storage.list_objects(uri)
    ]
    found = [(storage.versioned(file, obj.generation), obj) for file, obj in listed if is_data_object(obj.name)]
    if not found:
        raise DataError(
            uri,
            "no data files found; expected CSV, Parquet, JSONL or text shards under this prefix "
            "(_SUCCESS, _MANIFEST.json, landfall.json and names starting with '_' or '.' are not "
            "data). Check --data-uri.",
        )
    read = data_read(tuple(obj for _, obj in found), "digest" if digest else "listing")
    if digest and read.objects_digest != digest:
        raise DataError(
            uri,
            f"the folder changed since its dataset version was cut: it holds {read.object_count} data object(s), "
            f"{read.total_bytes} bytes, whose list has digest {read.objects_digest}; the version recorded "
            f"{digest}. The run trains only what its version recorded: land the dataset again (a new _SUCCESS) "
            "to train what is there now",
        )
    return DataFiles([file for file, _ in found], read)


def relative_name(uri: str, listed: str) -> str:
    """A file found by storage.list_files(uri), named relative to the dataset folder uri (its base name when uri
    names that one file)."""
    root = storage.resolve(uri)
    if storage.is_gcs(root):
        if listed == root:
            return posixpath.basename(listed)
        return listed[len(root.rstrip("/")) + 1 :]
    if Path(root).is_file():
        return Path(listed).name
    return Path(listed).relative_to(root).as_posix()


@dataclass(frozen=True)
class UnitPlan:
    """How the shards are cut into units for world_size processes."""

    n_shards: int
    world_size: int

    @property
    def parts(self) -> int:
        return max(1, math.ceil(self.world_size / self.n_shards))

    @property
    def n_units(self) -> int:
        return self.n_shards * self.parts

    def unit(self, shard: int, record_index: int) -> int:
        """The unit a record (0-based index within its shard) belongs to."""
        return shard * self.parts + record_index % self.parts

    def scan_shards(self, rank: int) -> list[int]:
        """The shards this rank reads once before training to count records and fit statistics."""
        return list(range(rank, self.n_shards, self.world_size))

    def epoch_units(self, seed: int, epoch: int, rank: int) -> list[int]:
        """This rank's training units for an epoch, in reading order."""
        return self.epoch_order(seed, epoch)[rank :: self.world_size]

    def epoch_order(self, seed: int, epoch: int) -> list[int]:
        generator = torch.Generator().manual_seed(mix(seed, epoch, 0x5EED) & 0x7FFFFFFFFFFFFFFF)
        return torch.randperm(self.n_units, generator=generator).tolist()

    def validation_units(self, rank: int) -> list[int]:
        """The units whose held-out records this rank evaluates (fixed across epochs)."""
        return list(range(rank, self.n_units, self.world_size))


def mix(*values: int) -> int:
    """A 64-bit hash of integers (splitmix64 steps): cheap, stable across processes and Python versions."""
    x = 0x9E3779B97F4A7C15
    for value in values:
        x = (x ^ (value & _MASK)) * 0xBF58476D1CE4E5B9 & _MASK
        x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
        x ^= x >> 31
    return x


def is_validation(shard: int, record_index: int, val_fraction: float) -> bool:
    """Whether a record is held out; depends only on its position, so every run splits the data the same way."""
    return val_fraction > 0 and mix(shard, record_index) < val_fraction * 2.0**64


def detect_format(uri: str, forced: str) -> str:
    """The reader for a file: forced unless 'auto', else by extension."""
    if forced != "auto":
        return forced
    name = posixpath.basename(storage.split_version(uri)[0]).lower()
    for ext in (".gz", ".bz2"):
        if name.endswith(ext):
            raise DataError(uri, f"compressed shards ({ext}) are not supported; store them uncompressed")
    for suffix, fmt in (
        (".csv", "csv"),
        (".parquet", "parquet"),
        (".pq", "parquet"),
        (".jsonl", "jsonl"),
        (".json", "jsonl"),
        (".ndjson", "jsonl"),
        (".txt", "text"),
        (".text", "text"),
    ):
        if name.endswith(suffix):
            return fmt
    raise DataError(
        uri,
        "cannot tell the format from the name; expected .csv, .parquet, .jsonl or .txt, "
        "or set --hparam data_format=csv|parquet|jsonl|text",
    )
