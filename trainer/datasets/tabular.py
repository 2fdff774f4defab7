"""Tabular data for the MLP tasks: one pass to count rows and fit normalisation, then streamed batches.

Feature means and standard deviations (and, for regression, the target's) are fitted on the training split
only, summed over every rank's shards, so every rank holds the same statistics. Classification labels (integers
or text) become class ids by their sorted order over every row of every shard, as scikit-learn's LabelEncoder
does; the classes travel in the spec, so predictions come back as the data's own labels.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

import torch

from trainer import collectives
from trainer.datasets.shards import UnitPlan, detect_format, is_validation
from trainer.datasets.stream import Batch, Counts
from trainer.datasets.tables import ClassLabel, TableSchema, read_rows, read_schema
from trainer.errors import DataError

_CHUNK = 1024
MAX_CLASSES = 10_000
"""More distinct labels than this is almost surely a wrong --label-column (an id, a measurement)."""


@dataclass(frozen=True)
class TabularSpec:
    """What the model and the loader need to know about the table; saved in the model's config.json."""

    task: str
    feature_names: tuple[str, ...]
    label_column: str
    n_outputs: int
    """Number of classes, or 1 for regression."""
    feature_mean: tuple[float, ...]
    feature_std: tuple[float, ...]
    label_mean: float = 0.0
    """Regression target mean (the model predicts the standardised target)."""
    label_std: float = 1.0
    classes: tuple[ClassLabel, ...] = ()
    """Classification: the label values in class-id order (sorted); empty for regression."""


class TabularCorpus:
    """Row records from CSV, Parquet or JSONL shards."""

    def __init__(self, files: list[str], task: str, label_column: str, data_format: str, world_size: int,
                 val_fraction: float) -> None:
        self.files = files
        self.task = task
        self.formats = [detect_format(f, data_format) for f in files]
        for uri, fmt in zip(files, self.formats, strict=True):
            if fmt not in ("csv", "parquet", "jsonl"):
                raise DataError(uri, f"is {fmt}; task {task} reads csv, parquet or jsonl tables")
        self.schema: TableSchema = read_schema(files[0], self.formats[0], label_column,
                                               class_labels=task == "tabular-classification")
        self.plan = UnitPlan(len(files), world_size)
        self.val_fraction = val_fraction
        self.spec: TabularSpec | None = None
        self._class_ids: dict[ClassLabel, int] = {}

    @property
    def classification(self) -> bool:
        return self.task == "tabular-classification"

    def records(self, shard: int) -> Iterator[tuple[list[float], float | ClassLabel]]:
        for _, features, label in read_rows(self.files[shard], self.formats[shard], self.schema):
            yield features, label

    def samples(self, units_size: int) -> int:
        return units_size

    def pack(self, records: Iterator[tuple[list[float], float | ClassLabel]]) -> Iterator[Batch]:
        assert self.spec is not None, "scan() first"
        xs: list[list[float]] = []
        ys: list[float | ClassLabel] = []
        for features, label in records:
            xs.append(features)
            ys.append(label)
            if len(xs) == _CHUNK:
                yield self._tensors(xs, ys)
                xs, ys = [], []
        if xs:
            yield self._tensors(xs, ys)

    def _tensors(self, xs: list[list[float]], ys: list[float | ClassLabel]) -> Batch:
        assert self.spec is not None
        x = torch.tensor(xs, dtype=torch.float32)
        if self.classification:
            return x, torch.tensor([self._class_ids[cast(ClassLabel, y)] for y in ys], dtype=torch.int64)
        y = (torch.tensor(ys, dtype=torch.float64) - self.spec.label_mean) / self.spec.label_std
        return x, y.to(torch.float32)

    def dummy_batch(self) -> Batch:
        x = torch.zeros(1, len(self.schema.features))
        return x, torch.zeros(1, dtype=torch.int64 if self.classification else torch.float32)

    def scan(self, rank: int, device: str) -> Counts:
        """Read this rank's shards once: validate every row, count rows per unit, fit the statistics, and (for
        classification) collect the labels. Collective: every rank ends with the same spec."""
        n_units, n_features = self.plan.n_units, len(self.schema.features)
        train = torch.zeros(n_units, dtype=torch.float64)
        val = torch.zeros(n_units, dtype=torch.float64)
        sums = torch.zeros(2 * n_features + 2, dtype=torch.float64)
        labels = _LabelSet(self.schema.label)
        for shard in self.plan.scan_shards(rank):
            uri, fmt = self.files[shard], self.formats[shard]
            rows: list[list[float]] = []
            for index, (line, features, label) in enumerate(read_rows(uri, fmt, self.schema)):
                if self.classification:
                    labels.add(cast(ClassLabel, label), uri, line)
                unit = self.plan.unit(shard, index)
                if is_validation(shard, index, self.val_fraction):
                    val[unit] += 1
                    continue
                train[unit] += 1
                rows.append([*features, 0.0 if self.classification else float(label)])
                if len(rows) == _CHUNK:
                    sums += _moments(rows)
                    rows = []
            if rows:
                sums += _moments(rows)
        packed = collectives.all_reduce(torch.cat([train, val, sums]), device)
        train, val, sums = packed[:n_units], packed[n_units:2 * n_units], packed[2 * n_units:]
        classes: tuple[ClassLabel, ...] = ()
        if self.classification:
            seen = _LabelSet.union(collectives.all_gather_object(labels))
            classes = seen.classes()
            self._class_ids = seen.class_ids(classes)
        self.spec = self._fit(sums, int(train.sum().item()), classes)
        return Counts(tuple(int(v) for v in train.tolist()), tuple(int(v) for v in val.tolist()))

    def _fit(self, sums: torch.Tensor, n: int, classes: tuple[ClassLabel, ...]) -> TabularSpec:
        if n == 0:
            raise DataError(self.files[0], "no training rows remain after holding out --hparam val_fraction")
        k = len(self.schema.features)
        mean = sums[:k] / n
        var = (sums[k + 1:2 * k + 1] / n - mean * mean).clamp(min=0.0)
        std = torch.where(var.sqrt() > 1e-12, var.sqrt(), torch.ones_like(var))
        label_mean = float(sums[k] / n)
        label_var = max(float(sums[2 * k + 1] / n) - label_mean**2, 0.0)
        if self.classification:
            if len(classes) < 2:
                raise DataError(self.files[0], f"label {self.schema.label!r} has {len(classes)} class(es) "
                                f"{list(classes)}; classification needs at least two")
            n_outputs, label_mean, label_std = len(classes), 0.0, 1.0
        else:
            n_outputs, label_std = 1, math.sqrt(label_var) if label_var > 1e-24 else 1.0
        return TabularSpec(self.task, self.schema.features, self.schema.label, n_outputs,
                           tuple(mean.tolist()), tuple(std.tolist()), label_mean, label_std, classes)


class _LabelSet:
    """The distinct class labels one rank has read, and where it first saw each."""

    def __init__(self, column: str) -> None:
        self.column = column
        self.values: set[ClassLabel] = set()
        self.first_uri = ""

    def add(self, label: ClassLabel, uri: str, line: int) -> None:
        if label in self.values:
            return
        self.values.add(label)
        self.first_uri = self.first_uri or uri
        if len(self.values) > MAX_CLASSES:
            raise DataError(uri, f"label {self.column!r} has more than {MAX_CLASSES} distinct values; is it the "
                            "right --label-column? For a continuous target use --task=tabular-regression", line=line)

    @staticmethod
    def union(sets: list[_LabelSet]) -> _LabelSet:
        """Every rank's labels in one set (the same on every rank)."""
        out = _LabelSet(sets[0].column)
        for part in sets:
            out.values |= part.values
            out.first_uri = out.first_uri or part.first_uri
        if len(out.values) > MAX_CLASSES:
            raise DataError(out.first_uri, f"label {out.column!r} has more than {MAX_CLASSES} distinct values; is it "
                            "the right --label-column? For a continuous target use --task=tabular-regression")
        return out

    def classes(self) -> tuple[ClassLabel, ...]:
        """The labels in class-id order: sorted integers when every label is one; otherwise every label is text
        (integers written in decimal) in sorted order."""
        if all(isinstance(v, int) for v in self.values):
            return tuple(sorted(v for v in self.values if isinstance(v, int)))
        return tuple(sorted({str(v) for v in self.values}))

    def class_ids(self, classes: tuple[ClassLabel, ...]) -> dict[ClassLabel, int]:
        """Every label as read -> its class id (an integer label maps to its text when the classes are text)."""
        ids = {label: i for i, label in enumerate(classes)}
        return {label: ids[label if label in ids else str(label)] for label in self.values}


def _moments(rows: list[list[float]]) -> torch.Tensor:
    """[sum of features, sum of label, sum of squared features, sum of squared label] of a chunk of rows."""
    block = torch.tensor(rows, dtype=torch.float64)
    return torch.cat([block.sum(0), (block * block).sum(0)])
