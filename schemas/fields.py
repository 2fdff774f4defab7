"""Typed readers for JSON objects: each failure is a SchemaError naming the dotted field and what was expected.

Numbers are held to what the wire carries: messages travel as JSON checked by a Protocol Buffer schema
(schemas/training_request.proto), whose `int64` is
a signed 64-bit integer and whose `double` has no NaN or Infinity in its JSON encoding. Python's json reads all of
those (`NaN`, `Infinity`, a 30-digit integer), so the reader refuses them here, naming the field, rather than
letting the topic refuse the message later.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from schemas.errors import SchemaError
from schemas.times import parse_timestamp

T = TypeVar("T")

_MISSING = object()

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
"""The range of a protobuf int64: every integer field of a message."""


def names_of(record: type) -> tuple[str, ...]:
    """The JSON field names of a record: its dataclass fields (the topic's Protocol Buffer schema is made from them)."""
    return tuple(f.name for f in dataclasses.fields(record))


def nearest(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to a mistyped one (difflib's ratio, at least 0.4: `trainable_params` finds
    `parameters`), or None when none is near."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.4)
    return close[0] if close else None


def _snake(key: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key).lower()


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _size(value: int) -> str:
    """An integer as a message may show it: itself, or its digit count when it is too long to print whole."""
    digits = len(str(abs(value))) if value.bit_length() < 10_000 else int(value.bit_length() * math.log10(2)) + 1
    return str(value) if digits <= 40 else f"an integer of {digits} digits"


class Reader:
    """Reads fields from one JSON object located at `path` (for error messages)."""

    def __init__(self, data: object, path: str = "") -> None:
        if not isinstance(data, Mapping):
            raise SchemaError(f"expected a JSON object, got {_type_name(data)}", field=path or "(message)")
        self.data: Mapping[str, Any] = data
        self.path = path

    def only(self, known: Iterable[str]) -> Reader:
        """This reader, once no key outside known is present: a mistyped field is refused, naming it and the nearest
        known name, as protobuf's JSON parser refuses an unknown field by default; never silently ignored."""
        names = tuple(known)
        for key in self.data:
            if key in names:
                continue
            shown = key if len(key) <= 80 else f"{key[:80]}..."
            where = f"of {self.path}" if self.path else "of the message"
            snake = _snake(key)
            if snake in names:
                hint = f"write it as {snake!r} (Landfall reads the schema's field names, not their lowerCamelCase form)"
            else:
                close = nearest(key, names)
                hint = f"did you mean {close!r}?" if close else f"known fields: {', '.join(names)}"
            raise SchemaError(f"is not a field {where}; {hint}", field=self._name(shown))
        return self

    def _name(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def _get(self, key: str, default: object) -> object:
        if key in self.data:
            return self.data[key]
        if default is _MISSING:
            raise SchemaError("is required but missing", field=self._name(key))
        return default

    def string(
        self, key: str, default: object = _MISSING, *, max_len: int = 1024, choices: tuple[str, ...] = ()
    ) -> str:
        value = self._get(key, default)
        if not isinstance(value, str):
            raise SchemaError(f"expected a string, got {_type_name(value)}", field=self._name(key))
        if len(value) > max_len:
            raise SchemaError(f"is {len(value)} characters long; the limit is {max_len}", field=self._name(key))
        if choices and value not in choices:
            raise SchemaError(f"{value!r} is not one of {', '.join(map(repr, choices))}", field=self._name(key))
        return value

    def integer(self, key: str, default: object = _MISSING, *, minimum: int | None = None) -> int:
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise SchemaError(f"expected an integer, got {_type_name(value)}", field=self._name(key))
        if not INT64_MIN <= value <= INT64_MAX:
            raise SchemaError(
                f"must fit in a signed 64-bit integer ({INT64_MIN} to {INT64_MAX}), got {_size(value)}",
                field=self._name(key),
            )
        if minimum is not None and value < minimum:
            raise SchemaError(f"must be >= {minimum}, got {value}", field=self._name(key))
        return value

    def number(self, key: str, default: object = _MISSING, *, minimum: float | None = None) -> float:
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SchemaError(f"expected a number, got {_type_name(value)}", field=self._name(key))
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            shown = _size(value) if isinstance(value, int) else repr(value)
            raise SchemaError(
                f"must be a finite number that fits in a 64-bit float (NaN and Infinity cannot be sent), got {shown}",
                field=self._name(key),
            )
        if minimum is not None and number < minimum:
            raise SchemaError(f"must be >= {minimum}, got {value}", field=self._name(key))
        return number

    def boolean(self, key: str, default: object = _MISSING) -> bool:
        value = self._get(key, default)
        if not isinstance(value, bool):
            raise SchemaError(f"expected true or false, got {_type_name(value)}", field=self._name(key))
        return value

    def strings(self, key: str, default: object = _MISSING) -> tuple[str, ...]:
        value = self._get(key, default)
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise SchemaError(f"expected a list of strings, got {_type_name(value)}", field=self._name(key))
        return tuple(value)

    def integers(self, key: str, default: object = _MISSING, *, minimum: int | None = None) -> tuple[int, ...]:
        value = self._get(key, default)
        if not isinstance(value, list | tuple):
            raise SchemaError(f"expected a list of integers, got {_type_name(value)}", field=self._name(key))
        for i, v in enumerate(value):
            if isinstance(v, bool) or not isinstance(v, int) or not INT64_MIN <= v <= INT64_MAX:
                raise SchemaError(f"expected a 64-bit integer, got {_type_name(v)}", field=f"{self._name(key)}[{i}]")
            if minimum is not None and v < minimum:
                raise SchemaError(f"must be >= {minimum}, got {v}", field=f"{self._name(key)}[{i}]")
        return tuple(value)

    def string_map(self, key: str, default: object = _MISSING) -> dict[str, str]:
        value = self._get(key, default)
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise SchemaError("expected an object of string values", field=self._name(key))
        return dict(value)

    def obj(self, key: str, default: object = _MISSING) -> Reader:
        return Reader(self._get(key, default), self._name(key))

    def optional_obj(self, key: str) -> Reader | None:
        value = self.data.get(key)
        return None if value is None else Reader(value, self._name(key))

    def timestamp(self, key: str, default: object = _MISSING, *, allow_empty: bool = False) -> str:
        """An RFC 3339 timestamp with a zone (kept as text); "" allowed when allow_empty."""
        value = self.string(key, default, max_len=64)
        if value == "" and allow_empty:
            return value
        parse_timestamp(value, field=self._name(key))
        return value
