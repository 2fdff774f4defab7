"""Generates the Avro schema of a message from its dataclasses, so the topic schema and the Python contract are one.

`python -m schemas.avro` rewrites schemas/training_request.avsc; a test fails when the file is stale.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import typing
from importlib import resources
from pathlib import Path
from typing import Any

from schemas.training_request import TrainingRequest

NAMESPACE = "dev.landfall.v1"
AVSC_PATH = resources.files("schemas").joinpath("training_request.avsc")
"""Package data of schemas/; the Pub/Sub topic's schema definition."""

_PRIMITIVES = {str: "string", int: "long", float: "double", bool: "boolean"}


def avro_type(tp: Any, seen: set[str]) -> Any:
    if tp in _PRIMITIVES:
        return _PRIMITIVES[tp]
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return {"type": "array", "items": avro_type(args[0], seen)}
    if origin is dict and args[0] is str:
        return {"type": "map", "values": avro_type(args[1], seen)}
    if dataclasses.is_dataclass(tp):
        return record(tp, seen)
    raise TypeError(f"no Avro mapping for {tp!r}: keep message fields to str/int/float/bool, tuples, dicts, records")


def record(cls: Any, seen: set[str]) -> Any:
    if cls.__name__ in seen:
        return f"{NAMESPACE}.{cls.__name__}"
    seen.add(cls.__name__)
    hints = typing.get_type_hints(cls)
    fields = [{"name": f.name, "type": avro_type(hints[f.name], seen)} for f in dataclasses.fields(cls)]
    return {"type": "record", "name": cls.__name__, "namespace": NAMESPACE, "fields": fields}


def training_request_schema() -> dict[str, Any]:
    schema: dict[str, Any] = record(TrainingRequest, set())
    schema["doc"] = ("Landfall TrainingRequest (JSON encoding: every field present; unset = \"\", 0 or []). "
                     "Generated from schemas/training_request.py by `python -m schemas.avro`.")
    return schema


def render() -> str:
    return json.dumps(training_request_schema(), indent=2) + "\n"


if __name__ == "__main__":
    if not isinstance(AVSC_PATH, Path):
        raise SystemExit(f"{AVSC_PATH} is not a file on disk: run `python -m schemas.avro` in a source checkout")
    AVSC_PATH.write_text(render())
    sys.stdout.write(f"wrote {AVSC_PATH}\n")
