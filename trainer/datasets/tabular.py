"""Tabular data for the MLP tasks: one pass to count rows and fit normalisation, then streamed batches.

Feature means and standard deviations (and, for regression, the target's) are fitted on the training split
only: each rank accumulates (count, mean, sum of squared deviations) over its shards, chunk by chunk (Chan et al.'s
pairwise update, exact for large offsets such as timestamps), and the ranks' parts are gathered and merged in rank
order, so every rank holds bit-identical statistics. Classification labels (integers
or text) become class ids by their sorted order over every row of every shard, as scikit-learn's LabelEncoder
does; the classes travel in the spec, so predictions come back as the data's own labels.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from trainer import collectives
from trainer.datasets.shards import UnitPlan, detect_format, is_validation
from trainer.datasets.stream import Batch, Counts
from trainer.datasets.tables import ClassLabel, TableSchema, read_rows, read_schema
from trainer.errors import DataError

_CHUNK = 1024
MAX_CLASSES = 10_000
"""More distinct labels than this is almost surely a wrong --label-column (an id, a measurement)."""


def _class_of(label: float | ClassLabel) -> ClassLabel:
    """A classification row's label, which read_rows gives as a class label (an int or text), never a float."""
    if isinstance(label, float):
        raise TypeError(f"expected a class label (an integer or text), got the number {label!r}")
    return label


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

    def __init__(
        self, files: list[str], task: str, label_column: str, data_format: str, world_size: int, val_fraction: float
    ) -> None:
        self.files = files
        self.task = task
        self.formats = [detect_format(f, data_format) for f in files]
        for uri, fmt in zip(files, self.formats, strict=True):
            if fmt not in ("csv", "parquet", "jsonl"):
                raise DataError(uri, f"is {fmt}; task {task} reads csv, parquet or jsonl tables")
        self.schema: TableSchema = read_schema(
            files[0], self.formats[0], label_column, class_labels=task == "tabular-classification"
        )
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
            return x, torch.tensor([self._class_ids[_class_of(y)] for y in ys], dtype=torch.int64)
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
        moments = Moments.empty(n_features + 1)
        labels = _LabelSet(self.schema.label)
        for shard in self.plan.scan_shards(rank):
            uri, fmt = self.files[shard], self.formats[shard]
            rows: list[list[float]] = []
            for index, (line, features, label) in enumerate(read_rows(uri, fmt, self.schema)):
                if self.classification:
                    labels.add(_class_of(label), uri, line)
                unit = self.plan.unit(shard, index)
                if is_validation(shard, index, self.val_fraction):
                    val[unit] += 1
                    continue
                train[unit] += 1
                rows.append([*features, 0.0 if self.classification else float(label)])
                if len(rows) == _CHUNK:
                    moments = moments.merge(Moments.of(rows))
                    rows = []
            if rows:
                moments = moments.merge(Moments.of(rows))
        packed = collectives.all_reduce(torch.cat([train, val]), device)
        train, val = packed[:n_units], packed[n_units:]
        moments = Moments.combine(collectives.all_gather_object(moments))
        classes: tuple[ClassLabel, ...] = ()
        if self.classification:
            seen = _LabelSet.union(collectives.all_gather_object(labels))
            classes = seen.classes()
            self._class_ids = seen.class_ids(classes)
        self.spec = self._fit(moments, classes)
        return Counts(tuple(int(v) for v in train.tolist()), tuple(int(v) for v in val.tolist()))

    def _fit(self, moments: Moments, classes: tuple[ClassLabel, ...]) -> TabularSpec:
        if moments.count == 0:
            raise DataError(self.files[0], "no training rows remain after holding out --hparam val_fraction")
        k = len(self.schema.features)
        var = moments.variance()
        mean, std = moments.mean[:k], torch.where(var[:k].sqrt() > 1e-12, var[:k].sqrt(), torch.ones(k))
        label_mean, label_var = float(moments.mean[k]), float(var[k])
        if self.classification:
            if len(classes) < 2:
                raise DataError(
                    self.files[0],
                    f"label {self.schema.label!r} has {len(classes)} class(es) "
                    f"{list(classes)}; classification needs at least two",
                )
            n_outputs, label_mean, label_std = len(classes), 0.0, 1.0
        else:
            n_outputs, label_std = 1, math.sqrt(label_var) if label_var > 1e-24 else 1.0
        return TabularSpec(
            self.task,
            self.schema.features,
            self.schema.label,
            n_outputs,
            tuple(mean.tolist()),
            tuple(std.tolist()),
            label_mean,
            label_std,
            classes,
        )


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
            raise DataError(
                uri,
                f"label {self.column!r} has more than {MAX_CLASSES} distinct values; is it the "
                "right --label-column? For a continuous target use --task=tabular-regression",
                line=line,
            )

    @staticmethod
    def union(sets: list[_LabelSet]) -> _LabelSet:
        """Every rank's labels in one set (the same on every rank)."""
        out = _LabelSet(sets[0].column)
        for part in sets:
            out.values |= part.values
            out.first_uri = out.first_uri or part.first_uri
        if len(out.values) > MAX_CLASSES:
            raise DataError(
                out.first_uri,
                f"label {out.column!r} has more than {MAX_CLASSES} distinct values; is it "
                "the right --label-column? For a continuous target use --task=tabular-regression",
            )
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


@dataclass(frozen=True)
class Moments:
    """Count, mean and sum of squared deviations (M2) per column, in float64."""

    count: int
    mean: torch.Tensor
    m2: torch.Tensor

    @staticmethod
    def empty(columns: int) -> Moments:
        return Moments(0, torch.zeros(columns, dtype=torch.float64), torch.zeros(columns, dtype=torch.float64))

    @staticmethod
    def of(rows: list[list[float]]) -> Moments:
        block = torch.tensor(rows, dtype=torch.float64)
        mean = block.mean(0)
        return Moments(len(rows), mean, ((block - mean) ** 2).sum(0))

    def merge(self, other: Moments) -> Moments:
        """Both parts' moments (Chan, Golub & LeVeque's pairwise update)."""
        if other.count == 0:
            return self
        if self.count == 0:
            return other
        n = self.count + other.count
        delta = other.mean - self.mean
        return Moments(
            n,
            self.mean + delta * (other.count / n),
            self.m2 + other.m2 + delta * delta * (self.count * other.count / n),
        )

    @staticmethod
    def combine(parts: list[Moments]) -> Moments:
        """Every rank's part merged in rank order: the same bits on every rank."""
        out = parts[0]
        for part in parts[1:]:
            out = out.merge(part)
        return out

    def variance(self) -> torch.Tensor:
        """Population variance per column."""
        return self.m2 / max(self.count, 1)
