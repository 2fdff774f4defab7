"""What a dataset folder holds: the one rule, shared by ingest and the trainer, for which objects are data.

A dataset is a folder. Names are taken relative to it ("part-0.csv", "_temporary/part-0.csv", "landfall.json"):

- `_SUCCESS` (MARKER), `_MANIFEST.json` (MANIFEST) and `landfall.json` (OVERRIDES) are control files, never data;
- a name with any segment that starts with `_` or `.` (`_temporary/...`, `.part-0.csv.crc`) is ignored, never data;
- a name ending in '/' (a folder placeholder) is not data;
- everything else is data.

Ingest counts and checks only data objects; the trainer reads only data objects as shards. Pure: no I/O.
"""

from __future__ import annotations

MARKER = "_SUCCESS"
"""Written last: the dataset is complete now."""
MANIFEST = "_MANIFEST.json"
"""Lists the objects that make the dataset complete."""
OVERRIDES = "landfall.json"
"""Per-dataset overrides of the route's training template."""
CONTROL_FILES = frozenset({MARKER, MANIFEST, OVERRIDES})
IGNORED_PREFIXES = ("_", ".")
"""A name segment starting with one of these is never data (Spark's _temporary/, Hadoop's .crc files, ...)."""


def base_name(relative_name: str) -> str:
    """The last segment of a name ("" for a folder placeholder ending in '/')."""
    return relative_name.rpartition("/")[2]


def is_control_file(relative_name: str) -> bool:
    """Whether the name is one of Landfall's control files (marker, manifest, overrides), at any depth."""
    return base_name(relative_name) in CONTROL_FILES


def is_ignored(relative_name: str) -> bool:
    """Whether any segment of the name starts with '_' or '.'."""
    return any(part.startswith(IGNORED_PREFIXES) for part in relative_name.split("/"))


def is_data_object(relative_name: str) -> bool:
    """Whether an object, named relative to its dataset folder, is training data."""
    return bool(base_name(relative_name)) and not is_control_file(relative_name) and not is_ignored(relative_name)
