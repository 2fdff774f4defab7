"""Text shards for causal language modelling over bytes (a 256-symbol vocabulary: nothing to download).

Records are lines (with their newline). Each rank concatenates its lines and cuts windows of seq_len + 1 bytes:
inputs are the first seq_len, targets the last seq_len. Lines that are not UTF-8 fail with the file and line.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from trainer import collectives, storage
from trainer.datasets.shards import UnitPlan, detect_format, is_validation
from trainer.datasets.stream import Batch, Counts
from trainer.errors import DataError

_WINDOWS_PER_CHUNK = 64


class TextCorpus:
    """Byte-level windows from .txt shards."""

    def __init__(self, files: list[str], seq_len: int, data_format: str, world_size: int, val_fraction: float):
        for uri in files:
            fmt = detect_format(uri, data_format)
            if fmt != "text":
                raise DataError(uri, f"is {fmt}; --task=causal-lm reads UTF-8 text shards (.txt)")
        self.files = files
        self.seq_len = seq_len
        self.plan = UnitPlan(len(files), world_size)
        self.val_fraction = val_fraction
        self.spec = {"vocab_size": 256, "tokenizer": "bytes", "seq_len": seq_len}

    def records(self, shard: int) -> Iterator[bytes]:
        uri = self.files[shard]
        empty = True
        with storage.open_read(uri) as raw:
            for number, line in enumerate(raw, start=1):
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise DataError(
                        uri, f"is not UTF-8 text ({exc.reason} at byte {exc.start} of the line)", line=number
                    ) from exc
                empty = False
                yield line
        if empty:
            raise DataError(uri, "is empty (an empty shard); expected UTF-8 text")

    def samples(self, units_size: int) -> int:
        return units_size // (self.seq_len + 1)

    def pack(self, records: Iterator[bytes]) -> Iterator[Batch]:
        width = self.seq_len + 1
        chunk = width * _WINDOWS_PER_CHUNK
        buffer = bytearray()
        for line in records:
            buffer += line
            if len(buffer) >= chunk:
                yield self._windows(buffer[:chunk])
                del buffer[:chunk]
        whole = len(buffer) // width * width
        if whole:
            yield self._windows(buffer[:whole])

    def _windows(self, data: bytearray) -> Batch:
        tokens = torch.frombuffer(data, dtype=torch.uint8).to(torch.int64).view(-1, self.seq_len + 1)
        return tokens[:, :-1], tokens[:, 1:]

    def dummy_batch(self) -> Batch:
        zeros = torch.zeros(1, self.seq_len, dtype=torch.int64)
        return zeros, zeros.clone()

    def scan(self, rank: int, device: str, reads: bool = True) -> Counts:
        """Read this rank's shards once: validate every line and count bytes per unit and split. Collective. reads
        False: a model-parallel peer of the process that reads data shard `rank` (same samples) adds nothing."""
        n_units = self.plan.n_units
        train = torch.zeros(n_units, dtype=torch.float64)
        val = torch.zeros(n_units, dtype=torch.float64)
        for shard in self.plan.scan_shards(rank) if reads else ():
            for index, line in enumerate(self.records(shard)):
                target = val if is_validation(shard, index, self.val_fraction) else train
                target[self.plan.unit(shard, index)] += len(line)
        packed = collectives.all_reduce(torch.cat([train, val]), device)
        counts = Counts(
            tuple(int(v) for v in packed[:n_units].tolist()), tuple(int(v) for v in packed[n_units:].tolist())
        )
        if self.samples(sum(counts.train)) == 0:
            raise DataError(
                self.files[0],
                f"the training split holds {sum(counts.train)} bytes in all; one sample "
                f"needs seq_len + 1 = {self.seq_len + 1}. Add text or pick a preset with a shorter seq_len",
            )
        return counts
