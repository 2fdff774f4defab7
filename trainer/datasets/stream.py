"""Turning a rank's units into batches: deterministic windowed shuffling, fixed step counts, padded evaluation.

Every rank computes the same step count for an epoch (the smallest share decides), so collectives never wait on
a rank that ran out of data. The order of samples depends only on (seed, epoch, rank): skipping the first k
batches reproduces exactly where an interrupted run stood.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from trainer.datasets.shards import UnitPlan, is_validation, mix

Batch = tuple[torch.Tensor, torch.Tensor]


class Corpus(Protocol):
    """A task's view of the shards: raw records per shard, their size, and how records become samples."""

    plan: UnitPlan
    val_fraction: float

    def records(self, shard: int) -> Iterator[Any]: ...

    def samples(self, units_size: int) -> int:
        """How many samples a stream of records of this total size yields."""
        ...

    def pack(self, records: Iterator[Any]) -> Iterator[Batch]:
        """Records in order -> chunks of samples (inputs, targets)."""
        ...

    def dummy_batch(self) -> Batch:
        """A one-sample batch of the right shapes, run (and ignored) to keep sharded models in step."""
        ...


@dataclass(frozen=True)
class Counts:
    """Total record size (rows, or bytes of text) per unit, in the training and the held-out split."""

    train: tuple[int, ...]
    val: tuple[int, ...]


def unit_records(corpus: Corpus, unit: int, validation: bool) -> Iterator[Any]:
    """The records of one unit in file order, from the training or the held-out split."""
    parts = corpus.plan.parts
    shard, part = divmod(unit, parts)
    for index, record in enumerate(corpus.records(shard)):
        if index % parts == part and is_validation(shard, index, corpus.val_fraction) == validation:
            yield record


def steps_in_epoch(corpus: Corpus, counts: Counts, seed: int, epoch: int, batch_size: int) -> int:
    """Optimizer steps every rank takes in this epoch: the smallest rank's full batches."""
    plan = corpus.plan
    order = plan.epoch_order(seed, epoch)
    shares = [sum(counts.train[u] for u in order[r :: plan.world_size]) for r in range(plan.world_size)]
    return min(corpus.samples(share) for share in shares) // batch_size


def eval_batches_needed(corpus: Corpus, counts: Counts, batch_size: int) -> int:
    """Evaluation batches every rank runs (the largest share decides; smaller shares pad)."""
    plan = corpus.plan
    shares = [sum(counts.val[u] for u in plan.validation_units(r)) for r in range(plan.world_size)]
    return max(-(-corpus.samples(share) // batch_size) for share in shares)


def held_out_samples(corpus: Corpus, counts: Counts) -> int:
    """Samples in the held-out split over every rank: what each epoch's evaluation scores."""
    plan = corpus.plan
    return sum(corpus.samples(sum(counts.val[u] for u in plan.validation_units(r))) for r in range(plan.world_size))


def train_batches(
    corpus: Corpus, seed: int, epoch: int, rank: int, batch_size: int, window: int, steps: int, skip: int = 0
) -> Iterator[Batch]:
    """This rank's batches for an epoch, from batch `skip` up to `steps`."""
    units = corpus.plan.epoch_units(seed, epoch, rank)

    def records() -> Iterator[Any]:
        for unit in units:
            yield from unit_records(corpus, unit, validation=False)

    generator = torch.Generator().manual_seed(mix(seed, epoch, rank) & 0x7FFFFFFFFFFFFFFF)
    batches = _shuffled(corpus.pack(records()), window, batch_size, generator)
    for index, batch in enumerate(batches):
        if index >= steps:
            return
        if index >= skip:
            yield batch


def eval_batches(corpus: Corpus, rank: int, batch_size: int, needed: int) -> Iterator[tuple[Batch, bool]]:
    """Exactly `needed` (batch, real) pairs; padding batches (real=False) keep sharded models in step."""
    units = corpus.plan.validation_units(rank)

    def records() -> Iterator[Any]:
        for unit in units:
            yield from unit_records(corpus, unit, validation=True)

    produced = 0
    for batch in _batched(corpus.pack(records()), batch_size, keep_last=True):
        if produced == needed:
            return
        produced += 1
        yield batch, True
    for _ in range(needed - produced):
        yield corpus.dummy_batch(), False


def _shuffled(chunks: Iterator[Batch], window: int, batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
    """Permute each run of `window` samples, then cut full batches (a partial last batch is dropped)."""

    def windows() -> Iterator[Batch]:
        xs: list[torch.Tensor] = []
        ys: list[torch.Tensor] = []
        held = 0
        for x, y in chunks:
            xs.append(x)
            ys.append(y)
            held += len(x)
            if held >= window:
                yield _permute(xs, ys, generator)
                xs, ys, held = [], [], 0
        if held:
            yield _permute(xs, ys, generator)

    yield from _batched(windows(), batch_size, keep_last=False)


def _permute(xs: list[torch.Tensor], ys: list[torch.Tensor], generator: torch.Generator) -> Batch:
    x, y = torch.cat(xs), torch.cat(ys)
    order = torch.randperm(len(x), generator=generator)
    return x[order], y[order]


def _batched(chunks: Iterator[Batch], batch_size: int, keep_last: bool) -> Iterator[Batch]:
    carry_x: torch.Tensor | None = None
    carry_y: torch.Tensor | None = None
    for x, y in chunks:
        if carry_x is not None and carry_y is not None:
            x, y = torch.cat([carry_x, x]), torch.cat([carry_y, y])
        full = len(x) // batch_size * batch_size
        for start in range(0, full, batch_size):
            yield x[start : start + batch_size], y[start : start + batch_size]
        carry_x, carry_y = x[full:], y[full:]
    if keep_last and carry_x is not None and carry_y is not None and len(carry_x):
        yield carry_x, carry_y
