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

from schemas.dataset_layout import is_data_object
from trainer import storage
from trainer.errors import DataError

_MASK = (1 << 64) - 1


def data_files(uri: str) -> list[str]:
    """The data files under uri, sorted, by the rule ingest also applies (schemas/dataset_layout.py): _SUCCESS,
    _MANIFEST.json, landfall.json and any name with a segment starting with '_' or '.' are not data."""
    files = [f for f in storage.list_files(uri) if is_data_object(relative_name(uri, f))]
    if not files:
        raise DataError(
            uri,
            "no data files found; expected CSV, Parquet, JSONL or text shards under this prefix "
            "(_SUCCESS, _MANIFEST.json, landfall.json and names starting with '_' or '.' are not "
            "data). Check --data-uri.",
        )
    return files


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
    name = posixpath.basename(uri).lower()
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
