"""How ingest reads object names: which are markers, manifests, overrides or data, and which folder is the dataset.

Pure functions over names; no I/O. A name is only ever compared and sliced, never passed to a shell.
"""

from __future__ import annotations

from enum import StrEnum

from deploy.routes import Route
from schemas.dataset_layout import MANIFEST, MARKER, OVERRIDES, is_data_object

MAX_OBJECT_NAME = 1024
"""Cloud Storage's limit on an object name, in UTF-8 bytes."""


class Role(StrEnum):
    MARKER = "marker"
    MANIFEST = "manifest"
    OVERRIDES = "overrides"
    DATA = "data"
    CONTROL = "control"
    """Other names that are not data (schemas/dataset_layout.py: a segment starting with '_' or '.', e.g.
    _temporary/ or .crc files, or a folder placeholder): never data, never a trigger."""


def name_problem(name: str) -> str | None:
    """Why an object name cannot be taken as Landfall input, or None when it can."""
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "object name holds a lone surrogate (not UTF-8, which Cloud Storage names are); rename the object"
    if size > MAX_OBJECT_NAME:
        return f"object name is {size} bytes; Cloud Storage allows at most {MAX_OBJECT_NAME}"
    bad = next((c for c in name if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        return f"object name contains the control character {bad!r}; rename the object without it"
    parts = name.split("/")
    if ".." in parts or "." in parts:
        return "object name has a '.' or '..' path segment; datasets are plain folders, rename the object"
    if name.startswith("/") or "//" in name:
        return "object name starts with '/' or holds an empty folder ('//'); rename the object"
    return None


def split(name: str) -> tuple[str, str]:
    """(folder with trailing '/', base name)."""
    folder, _, base = name.rpartition("/")
    return (f"{folder}/" if folder else ""), base


def role_of(name: str) -> Role:
    """What an object is to ingest; whether it is data is schemas.dataset_layout's rule, shared with the trainer."""
    base = split(name)[1]
    if base == MARKER:
        return Role.MARKER
    if base == MANIFEST:
        return Role.MANIFEST
    if base == OVERRIDES:
        return Role.OVERRIDES
    return Role.DATA if is_data_object(name) else Role.CONTROL


def format_of(name: str) -> str:
    """The data format as the lower-case extension ("csv"); "" when the name has none."""
    base = split(name)[1]
    return base.rsplit(".", 1)[1].lower() if "." in base.strip(".") else ""


def ancestor_prefixes(name: str, route: Route) -> list[str]:
    """Every folder holding name that lies strictly below the route's prefix, deepest first."""
    folder = split(name)[0]
    out = []
    while len(folder) > len(route.prefix) and folder.startswith(route.prefix):
        out.append(folder)
        folder = split(folder.rstrip("/"))[0]
    return out


def quiet_dataset_prefix(name: str, route: Route) -> str | None:
    """The dataset a data object belongs to on a quiet-period route: route prefix + dataset_depth folders."""
    rest = name[len(route.prefix) :].split("/")
    if len(rest) <= route.dataset_depth:
        return None
    return route.prefix + "/".join(rest[: route.dataset_depth]) + "/"
