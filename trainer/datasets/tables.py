"""Readers for tabular shards (CSV with a header row, Parquet, JSON Lines), streaming and strict.

Every feature column must be numeric; the label column must exist. A regression label is a number; a class label
is an integer or text ("benign"), and 1, "1" and "1.0" are the same class. A ragged row, a non-numeric value, a
missing label, bytes that are not UTF-8 or an empty shard fail at once with the file and line (or Parquet row) named.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from trainer import storage
from trainer.errors import DataError

ClassLabel = int | str
"""A classification label as read: an integer class or a text class."""
Row = tuple[int, list[float], float | ClassLabel]
"""(line or row number, features in schema order, label: a number, or a class label when schema.class_labels)."""


@dataclass(frozen=True)
class TableSchema:
    """Feature columns (in order) and the label column, taken from the first shard and required of all."""

    features: tuple[str, ...]
    label: str
    class_labels: bool = False
    """The label is a class (classification: an integer or text), not a number to regress on."""


def _utf8_lines(uri: str) -> Iterator[tuple[int, str]]:
    with storage.open_read(uri) as raw:
        for number, line in enumerate(raw, start=1):
            try:
                yield number, line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(uri, f"is not UTF-8 text ({exc.reason} at byte {exc.start})", line=number) from exc


def _number(uri: str, line: int, column: str, value: Any, unit: str = "line") -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        out = math.nan
    if not math.isfinite(out):
        raise DataError(uri, f"column {column!r} holds {value!r}; expected a finite number", line=line, unit=unit)
    return out


def class_label(uri: str, line: int, column: str, value: Any, unit: str = "line") -> ClassLabel:
    """A class label: an integer when the value is a whole number (1, "1", 1.0 and "1.0" alike), else its text."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise DataError(uri, f"column {column!r} is empty; every row needs a class label", line=line, unit=unit)
        try:
            return int(text)
        except ValueError:
            pass
        try:
            number = float(text)
        except ValueError:
            return text
    elif isinstance(value, float):
        number = value
    else:
        raise DataError(
            uri, f"column {column!r} holds {value!r}; expected a class label (an integer or text)", line=line, unit=unit
        )
    if not math.isfinite(number):
        raise DataError(
            uri, f"column {column!r} holds {value!r}; expected a class label (an integer or text)", line=line, unit=unit
        )
    if number != int(number):
        raise DataError(
            uri,
            f"column {column!r} holds {value!r}, a fractional number: classification needs class "
            "labels (integers or text). For a continuous target use --task=tabular-regression",
            line=line,
            unit=unit,
        )
    return int(number)


def _label(uri: str, line: int, schema: TableSchema, value: Any, unit: str = "line") -> float | ClassLabel:
    if schema.class_labels:
        return class_label(uri, line, schema.label, value, unit)
    return _number(uri, line, schema.label, value, unit)


def read_schema(uri: str, fmt: str, label_column: str, class_labels: bool = False) -> TableSchema:
    """The columns of a shard: every column except the label is a feature."""
    if fmt == "csv":
        for _, text in _utf8_lines(uri):
            columns = next(csv.reader([text]), [])
            break
        else:
            raise DataError(uri, "is empty; expected a header row and at least one data row")
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        with storage.open_read(uri) as fh:
            columns = list(pq.ParquetFile(fh).schema_arrow.names)
    elif fmt == "jsonl":
        columns = []
        for number, text in _utf8_lines(uri):
            if text.strip():
                columns = list(_json_object(uri, number, text))
                break
        if not columns:
            raise DataError(uri, "is empty; expected one JSON object per line")
    else:
        raise DataError(uri, f"format {fmt!r} is not a table; expected csv, parquet or jsonl")
    columns = [c.strip() for c in columns]
    if label_column not in columns:
        raise DataError(
            uri,
            f"has no label column {label_column!r}; columns are {columns}. "
            "Set --label-column to the column that holds the target.",
            line=1 if fmt != "parquet" else None,
        )
    if len(set(columns)) != len(columns):
        raise DataError(uri, f"repeats a column name: {columns}", line=1 if fmt != "parquet" else None)
    features = tuple(c for c in columns if c != label_column)
    if not features:
        raise DataError(uri, f"has only the label column {label_column!r}; expected at least one feature column")
    return TableSchema(features=features, label=label_column, class_labels=class_labels)


def read_rows(uri: str, fmt: str, schema: TableSchema) -> Iterator[Row]:
    """Every data row of one shard in file order; raises DataError on the first bad one."""
    count = 0
    reader = {"csv": _csv_rows, "parquet": _parquet_rows, "jsonl": _jsonl_rows}[fmt]
    for row in reader(uri, schema):
        count += 1
        yield row
    if count == 0:
        raise DataError(uri, "has no data rows (an empty shard); expected at least one row after the header")


def _check_columns(uri: str, found: list[str], schema: TableSchema, line: int | None) -> list[int]:
    expected = {*schema.features, schema.label}
    if set(found) != expected or len(found) != len(expected):
        raise DataError(
            uri,
            f"columns {sorted(found)} differ from the first shard's {sorted(expected)}; "
            "every shard must have the same columns",
            line=line,
        )
    position = {name: i for i, name in enumerate(found)}
    return [position[name] for name in (*schema.features, schema.label)]


def _csv_rows(uri: str, schema: TableSchema) -> Iterator[Row]:
    lines = _utf8_lines(uri)
    numbers: list[int] = []

    def text() -> Iterator[str]:
        for number, line in lines:
            numbers.append(number)
            yield line

    reader = csv.reader(text())
    header = next(reader, None)
    if header is None:
        raise DataError(uri, "is empty; expected a header row and at least one data row")
    order = _check_columns(uri, [h.strip() for h in header], schema, 1)
    width = len(header)
    columns = [*schema.features, schema.label]
    for fields in reader:
        line = numbers[-1]
        if not fields or (len(fields) == 1 and not fields[0].strip()):
            continue
        if len(fields) != width:
            raise DataError(uri, f"has {len(fields)} fields; the header has {width} (a ragged row)", line=line)
        features = [_number(uri, line, columns[k], fields[i]) for k, i in enumerate(order[:-1])]
        yield line, features, _label(uri, line, schema, fields[order[-1]])


def _json_object(uri: str, line: int, text: str) -> dict[str, Any]:
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(uri, f"is not valid JSON ({exc.msg})", line=line) from exc
    if not isinstance(record, dict):
        raise DataError(uri, f"holds a JSON {type(record).__name__}; expected an object per line", line=line)
    return record


def _jsonl_rows(uri: str, schema: TableSchema) -> Iterator[Row]:
    columns = [*schema.features, schema.label]
    for line, text in _utf8_lines(uri):
        if not text.strip():
            continue
        record = _json_object(uri, line, text)
        missing = [c for c in columns if c not in record]
        if missing:
            raise DataError(uri, f"lacks {missing}; every record needs {columns}", line=line)
        features = [_number(uri, line, c, record[c]) for c in schema.features]
        yield line, features, _label(uri, line, schema, record[schema.label])


def _parquet_rows(uri: str, schema: TableSchema) -> Iterator[Row]:
    import pyarrow.parquet as pq

    columns = [*schema.features, schema.label]
    with storage.open_read(uri) as fh:
        table = pq.ParquetFile(fh)
        _check_columns(uri, list(table.schema_arrow.names), schema, None)
        row = 0
        for batch in table.iter_batches(batch_size=4096, columns=columns):
            data = [batch.column(i).to_pylist() for i in range(len(columns))]
            for values in zip(*data, strict=True):
                row += 1
                features = [
                    _number(uri, row, c, v, unit="row") for c, v in zip(schema.features, values[:-1], strict=True)
                ]
                yield row, features, _label(uri, row, schema, values[-1], unit="row")
