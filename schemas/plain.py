"""`plain`: dataclasses.asdict without its deep copies.

`dataclasses.asdict` deep-copies every leaf value (`copy.deepcopy` of each string and number), which is most of what
it costs: a TrainingRequest carrying its dataset's object list went through it at about 1 ms a call, twice per
dispatched request. The records here hold only immutable leaves (str, int, float, bool, None) inside dataclasses,
lists, tuples and dicts, so the containers are what must be new; a leaf of any other type is still deep-copied, as
asdict does. tests/unit/test_plain.py checks it equal to asdict over every record type it serves.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

_IMMUTABLE = (str, int, float, bool, type(None))
_NAMES: dict[type, tuple[str, ...]] = {}


def _names(cls: type) -> tuple[str, ...]:
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def as_dict(record: object) -> dict[str, Any]:
    """dataclasses.asdict(record), as `plain` makes it; TypeError for anything but a dataclass instance."""
    if not dataclasses.is_dataclass(record) or isinstance(record, type):
        raise TypeError(f"as_dict() should be called on dataclass instances, not {type(record).__name__}")
    found: dict[str, Any] = plain(record)
    return found


def plain(value: Any) -> Any:
    """What dataclasses.asdict(value) returns for a dataclass (and asdict's treatment of anything inside one):
    dataclasses become dicts, lists and tuples become new lists and tuples, dicts new dicts; leaves are shared when
    immutable, else deep-copied."""
    kind = type(value)
    if kind in _IMMUTABLE:
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: plain(getattr(value, name)) for name in _names(kind)}
    if kind is list:
        return [plain(v) for v in value]
    if kind is tuple:
        return tuple(plain(v) for v in value)
    if kind is dict:
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | dict):  # subclasses (namedtuples, defaultdicts): asdict's own handling
        return dataclasses.asdict(_Box(value))["value"]
    return copy.deepcopy(value)


@dataclasses.dataclass(frozen=True)
class _Box:
    value: Any
