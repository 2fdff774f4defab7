"""The exact version of a team's code a run trains with: each Cloud Storage object its request names (the script, the
packages) as the dispatcher found it before planning, so that the job fetches exactly that generation and the run and
its model's lineage say which code made them.

A route binds a script by a path (`[routes.trainer] script = "gs://CODE/teams/a/train.py"`) that the team may upload
again at any time; without this, a run would train with whatever is there when its job starts, and the lineage could
not tell two versions apart. Stored on the run as `code` (absent for the built-in trainer and a container image, whose
image reference is its version):

    "code": [{"uri": "gs://CODE/teams/a/train.py", "generation": "1764330000123456", "crc32c": "yZRlqg==",
              "size": 4120}]

The job names each object as `URI#GENERATION` (trainer.storage.download_file fetches exactly that generation).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from schemas.errors import SchemaError
from schemas.fields import Reader

MAX_CODE_OBJECTS = 64
"""Objects a run's `code` holds at most (a script, or the packages: trainer_spec bounds package_uris below this)."""


@dataclass(frozen=True)
class CodeObject:
    uri: str
    """gs://BUCKET/NAME as the request names it."""
    generation: str
    crc32c: str = ""
    """Base64 of the big-endian CRC32C, as Cloud Storage gives it: the content's digest."""
    size: int = 0

    @property
    def pinned(self) -> str:
        """The URI of exactly this version: gs://BUCKET/NAME#GENERATION."""
        return f"{self.uri}#{self.generation}"

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri, "generation": self.generation, "crc32c": self.crc32c, "size": self.size}


def pins(code: Iterable[CodeObject]) -> dict[str, str]:
    """Each object's URI -> its pinned URI, for the job."""
    return {c.uri: c.pinned for c in code}


def parse_code_objects(data: object) -> tuple[CodeObject, ...]:
    """The run's `code` list; SchemaError naming what does not fit."""
    if not isinstance(data, list):
        raise SchemaError("expected a list of {uri, generation, crc32c, size} objects", field="run.code")
    if len(data) > MAX_CODE_OBJECTS:
        raise SchemaError(f"holds {len(data)} objects, at most {MAX_CODE_OBJECTS}", field="run.code")
    out = []
    for i, item in enumerate(data):
        r = Reader(item, f"run.code[{i}]")
        uri = r.string("uri", max_len=1100)
        generation = r.string("generation", max_len=32)
        if not uri.startswith("gs://") or not generation.isdigit():
            raise SchemaError(
                f"expected a gs:// URI and a numeric generation, got {uri!r} and {generation!r}", field=f"run.code[{i}]"
            )
        out.append(CodeObject(uri, generation, r.string("crc32c", "", max_len=16), r.integer("size", 0)))
    return tuple(out)


__all__ = ["MAX_CODE_OBJECTS", "CodeObject", "parse_code_objects", "pins"]
