"""Generates the Protocol Buffer schema of a message from its dataclasses, so the topic schema and the Python
contract are one.

The requests topic takes this schema with JSON encoding. Protobuf's JSON form lets a publisher leave out any field
(proto3 fields are all optional on the wire), which Avro's JSON encoding cannot: a user publishes the dataset URI,
task and preset and parse_training_request fills in the rest. The topic still refuses a message that is not JSON,
names a field the schema does not have, or gives a field the wrong type.

`python -m schemas.proto` rewrites schemas/training_request.proto; a test fails when the file is stale. Field
numbers follow the dataclass field order (JSON encoding does not carry them, but keep new fields at the end).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import typing
from importlib import resources
from pathlib import Path
from typing import Any

from schemas.training_request import TrainingRequest

PACKAGE = "dev.landfall.v1"
PROTO_PATH = resources.files("schemas").joinpath("training_request.proto")
"""Package data of schemas/; the Pub/Sub topic's schema definition."""

_SCALARS = {str: "string", int: "int64", float: "double", bool: "bool"}


def field_type(tp: Any, messages: dict[str, Any]) -> str:
    """The proto type of one dataclass field; nested dataclasses are collected into `messages`."""
    if tp in _SCALARS:
        return _SCALARS[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return "repeated " + field_type(args[0], messages)
    if origin is dict and args[0] is str and args[1] in _SCALARS:
        return f"map<string, {_SCALARS[args[1]]}>"
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        collect(tp, messages)
        return tp.__name__
    raise TypeError(
        f"no protobuf mapping for {tp!r}: keep message fields to str/int/float/bool, tuples, dicts of scalars, records"
    )


def collect(cls: Any, messages: dict[str, Any]) -> None:
    """Adds `cls` and every record it holds to `messages` (name -> lines), in first-use order."""
    if cls.__name__ in messages:
        return
    messages[cls.__name__] = None  # reserve the slot: the top message comes first
    hints = typing.get_type_hints(cls)
    lines = [
        f"  {field_type(hints[f.name], messages)} {f.name} = {number};"
        for number, f in enumerate(dataclasses.fields(cls), start=1)
    ]
    messages[cls.__name__] = lines


def render() -> str:
    messages: dict[str, Any] = {}
    collect(TrainingRequest, messages)
    out = [
        "// Landfall TrainingRequest, the requests topic's schema (JSON encoding: any field may be left out and",
        "// parse_training_request applies the defaults of schemas/training_request.py).",
        "// Generated from schemas/training_request.py by `python -m schemas.proto`; do not edit.",
        'syntax = "proto3";',
        "",
        f"package {PACKAGE};",
    ]
    top, *nested = messages.items()
    out += ["", f"message {top[0]} {{"]
    for name, lines in nested:  # Pub/Sub takes one top-level message: the records it holds are nested in it
        out += [f"  message {name} {{", *("  " + line for line in lines), "  }", ""]
    out += [*top[1], "}"]
    return "\n".join(out) + "\n"


_DESCRIPTOR_TYPES = {"string": 9, "int64": 3, "double": 1, "bool": 8}  # FieldDescriptorProto.Type values


@functools.cache
def message_class() -> Any:
    """A protobuf message class for TrainingRequest built from the same dataclasses (no protoc needed), so tests
    can hold JSON to the rules Pub/Sub applies at publish time (google.protobuf.json_format: omitted fields allowed,
    unknown fields and wrong types refused)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    file = descriptor_pb2.FileDescriptorProto(name="landfall_training_request.proto", package=PACKAGE, syntax="proto3")
    top = file.message_type.add(name=TrainingRequest.__name__)
    _describe(TrainingRequest, top, top, f".{PACKAGE}.{TrainingRequest.__name__}")
    pool = descriptor_pool.DescriptorPool()  # kept alive by the cache: the class needs its pool
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{TrainingRequest.__name__}"))


def _describe(cls: Any, message: Any, top: Any, top_name: str) -> None:
    hints = typing.get_type_hints(cls)
    for number, f in enumerate(dataclasses.fields(cls), start=1):
        tp = hints[f.name]
        field = message.field.add(name=f.name, number=number, label=1, json_name=f.name)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is tuple:
            field.label, tp = 3, args[0]
        if origin is dict:
            entry_name = "".join(part.title() for part in f.name.split("_")) + "Entry"
            entry = message.nested_type.add(name=entry_name)
            entry.options.map_entry = True
            entry.field.add(name="key", number=1, label=1, type=9)
            entry.field.add(name="value", number=2, label=1, type=_DESCRIPTOR_TYPES[_SCALARS[args[1]]])
            field.label, field.type = 3, 11
            field.type_name = (
                f"{top_name}.{entry_name}" if message is top else f"{top_name}.{message.name}.{entry_name}"
            )
        elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
            field.type, field.type_name = 11, f"{top_name}.{tp.__name__}"
            if not any(m.name == tp.__name__ for m in top.nested_type):
                _describe(tp, top.nested_type.add(name=tp.__name__), top, top_name)
        else:
            field.type = _DESCRIPTOR_TYPES[_SCALARS[tp]]


if __name__ == "__main__":
    if not isinstance(PROTO_PATH, Path):
        raise SystemExit(f"{PROTO_PATH} is not a file on disk: run `python -m schemas.proto` in a source checkout")
    PROTO_PATH.write_text(render())
    sys.stdout.write(f"wrote {PROTO_PATH}\n")
