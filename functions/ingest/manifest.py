"""_MANIFEST.json: the list of objects that make a dataset complete. Parsing and checking are pure functions.

Format (names relative to the folder holding the manifest):
    {"objects": [{"name": "part-00000.csv", "size": 1234, "crc32c": "yZRlqg=="}, ...]}
`crc32c` is optional: base64 of the big-endian CRC32C, as `gcloud storage objects describe` shows it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from functions.gcp.gcs_objects import ObjectInfo
from functions.ingest.dataset_names import Role, name_problem, role_of
from schemas import json_text
from schemas.fields import INT64_MAX

MAX_MANIFEST_BYTES = 1024 * 1024
"""Largest manifest read (1 MiB, about 10,000 entries). Bigger datasets: use a `_SUCCESS` marker."""
MAX_ENTRIES = 20_000
_SHOWN = 5


class ManifestError(ValueError):
    """The manifest cannot be used; the message says why and what to do."""


@dataclass(frozen=True)
class Entry:
    name: str
    size: int
    crc32c: str = ""


def parse_manifest(data: bytes) -> tuple[Entry, ...]:
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(
            f"_MANIFEST.json is larger than {MAX_MANIFEST_BYTES} bytes; list at most "
            f"{MAX_ENTRIES} objects, or complete big datasets with a _SUCCESS marker instead"
        )
    try:
        raw = json_text.loads(data)
    except json_text.JsonTextError as exc:
        raise ManifestError(
            f'_MANIFEST.json is not JSON ({exc}); expected {{"objects": [{{"name": "part-0.csv", "size": 123}}]}}'
        ) from exc
    objects = raw.get("objects") if isinstance(raw, dict) else None
    if not isinstance(objects, list) or not objects:
        raise ManifestError('_MANIFEST.json needs a non-empty "objects" list of {"name", "size"[, "crc32c"]}')
    if len(objects) > MAX_ENTRIES:
        raise ManifestError(
            f"_MANIFEST.json lists {len(objects)} objects; at most {MAX_ENTRIES} are read. Use a "
            "_SUCCESS marker for bigger datasets"
        )
    entries: dict[str, Entry] = {}
    for i, item in enumerate(objects):
        where = f"_MANIFEST.json objects[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ManifestError(f'{where}: expected an object with a string "name"')
        name, size, crc = item["name"], item.get("size"), item.get("crc32c", "")
        problem = name_problem(name)
        if problem or name.startswith("/") or role_of(name) != Role.DATA:
            raise ManifestError(
                f"{where}: {name[:200]!r} is not a data object name relative to the dataset "
                f"folder ({problem or 'markers, manifests and _/. files cannot be listed'})"
            )
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= INT64_MAX:
            shown = repr(size) if len(repr(size)) <= 60 else f"{repr(size)[:60]}..."
            raise ManifestError(
                f'{where} ({name}): "size" must be a whole number of bytes (at most '
                f"{INT64_MAX}, Cloud Storage's int64), got {shown}"
            )
        if not isinstance(crc, str) or len(crc) > 12:  # base64 of 4 bytes: 8 characters
            raise ManifestError(f'{where} ({name}): "crc32c" must be the base64 string GCS reports (e.g. "yZRlqg==")')
        if name in entries:
            raise ManifestError(f"{where}: {name!r} is listed twice")
        entries[name] = Entry(name, size, crc)
    return tuple(entries.values())


def manifest_problems(entries: Iterable[Entry], present: Mapping[str, ObjectInfo]) -> list[str]:
    """What keeps the listed objects from matching what is in the bucket (names relative to the dataset)."""
    missing, wrong = [], []
    for entry in entries:
        found = present.get(entry.name)
        name = entry.name if len(entry.name) <= 100 else f"{entry.name[:100]}..."  # names may be 1,024 bytes
        if found is None:
            missing.append(name)
        elif found.size != entry.size:
            wrong.append(f"{name} is {found.size} bytes, manifest says {entry.size}")
        elif entry.crc32c and found.crc32c and found.crc32c != entry.crc32c:
            wrong.append(f"{name} has crc32c {found.crc32c}, manifest says {entry.crc32c}")
    problems = []
    if missing:
        more = f" and {len(missing) - _SHOWN} more" if len(missing) > _SHOWN else ""
        problems.append(f"{len(missing)} listed object(s) missing: {', '.join(missing[:_SHOWN])}{more}")
    if wrong:
        more = f" and {len(wrong) - _SHOWN} more" if len(wrong) > _SHOWN else ""
        problems.append(f"{len(wrong)} object(s) differ from the manifest: {'; '.join(wrong[:_SHOWN])}{more}")
    return problems
