"""Single-document writes in one Commit, encoded straight into Firestore's protobuf messages.

The client library encodes every value of a document through proto-plus: a `Value` wrapper built and marshalled per
field, which is most of a write's CPU (a run's claim carries some 700 values: the plan, its fallbacks, the attempts).
Here each value is written in place into the underlying protobuf message (`Value.pb()`, the same message the library
sends), and the Commit goes through the library's own Firestore API client with its own retry settings, database
string and request metadata. The result on the wire is the library's: tests/unit/test_firestore_writes.py checks the
encoding against `google.cloud.firestore_v1._helpers.encode_value` value by value, and
tests/integration/test_runs_store_known.py checks the stored documents against the emulator.

It reads four attributes the library keeps private (the client's `_firestore_api`, `_database_string` and
`_rpc_metadata`, a reference's `_document_path`), the same ones the library's own WriteBatch uses to commit: the
library is pinned (functions/requirements.txt), and both tests above run the real calls, so an upgrade that moves
them fails there, not in a deployment.

Only what Landfall's documents hold is encoded here (None, bool, int, float, str, datetime, dict, list and tuple;
a datetime by the conversions the library's `encode_value` calls); anything else
(bytes, GeoPoints) is encoded by the library's own `encode_value`.
An update's DELETE_FIELD deletes its path; the server-side transforms (SERVER_TIMESTAMP, Increment, ...) are not
sent from here: `encode_value` refuses them with a TypeError, so a document that holds one fails loudly (write it
through the library, as functions/gcp/rate_limits_store.py does).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import SimpleNamespace
from typing import Any

Path = tuple[str, ...]


@functools.cache
def _types() -> SimpleNamespace:
    """The protobuf message classes under the library's proto-plus types (imported on first use)."""
    from google.cloud.firestore_v1.types import common, firestore, write

    return SimpleNamespace(
        Write=write.Write.pb(),
        Precondition=common.Precondition.pb(),
        CommitRequest=firestore.CommitRequest.pb(),
        commit_request=firestore.CommitRequest,
    )


def fill(target: Any, value: Any) -> None:
    """Encode value into the protobuf `Value` message target, in place."""
    if value is None:
        target.null_value = 0
    elif value is True or value is False:
        target.boolean_value = value
    elif type(value) is int:
        target.integer_value = value
    elif type(value) is float:
        target.double_value = value
    elif type(value) is str:
        target.string_value = value
    elif isinstance(value, Mapping):
        fill_map(target.map_value, value)
    elif isinstance(value, list | tuple):
        array = target.array_value
        array.SetInParent()
        for item in value:
            fill(array.values.add(), item)
    elif isinstance(value, datetime):  # the library's own conversions, without its proto-plus Value around them
        if hasattr(value, "timestamp_pb"):  # api_core's DatetimeWithNanoseconds, its nanoseconds kept
            target.timestamp_value.CopyFrom(value.timestamp_pb())
        else:
            from google.cloud._helpers import _datetime_to_pb_timestamp

            target.timestamp_value.CopyFrom(_datetime_to_pb_timestamp(value))
    else:
        from google.cloud.firestore_v1 import _helpers

        target.CopyFrom(_helpers.encode_value(value)._pb)


def fill_map(target: Any, values: Mapping[str, Any]) -> None:
    """Encode a map into a protobuf message with a `fields` map (MapValue or Document), in place."""
    target.SetInParent()
    fields = target.fields
    for key, value in values.items():
        fill(fields[key], value)


def create(client: Any, ref: Any, doc: Mapping[str, Any]) -> Any:
    """Create the document (it must not exist): its update time, the protobuf Timestamp Firestore answered. Raises
    the library's Conflict (AlreadyExists) when it exists."""
    return commit(client, [create_write(ref, doc)])[0].update_time


def create_write(ref: Any, doc: Mapping[str, Any]) -> Any:
    """The Write of create: the whole document, on the condition that none exists."""
    pb = _types()
    write = pb.Write(current_document=pb.Precondition(exists=False))
    write.update.name = ref._document_path
    fill_map(write.update, doc)
    return write


def update_if_unchanged(
    client: Any, ref: Any, fields: Mapping[Path, Any], update_time: Any, also: Sequence[Any] = ()
) -> tuple[Any, list[Any]]:
    """Set each field path to its value (the library's DELETE_FIELD deletes it), on the condition that the document
    was last updated at update_time (a protobuf Timestamp, or the library's datetime): its new update time, and the
    WriteResults of `also` (protobuf Writes to other documents made in the same Commit, after this one: all or none
    of them happen). Raises the library's FailedPrecondition when the document changed since (NotFound when it
    went)."""
    results = commit(client, [update_write(ref, fields, update_time), *also])
    return results[0].update_time, list(results[1:])


def update_write(ref: Any, fields: Mapping[Path, Any], update_time: Any) -> Any:
    """The Write of update_if_unchanged."""
    from google.cloud.firestore_v1 import DELETE_FIELD
    from google.cloud.firestore_v1.field_path import FieldPath

    pb = _types()
    write = pb.Write()
    write.update.name = ref._document_path
    write.update.SetInParent()
    nested: dict[str, Any] = {}
    for path, value in fields.items():
        write.update_mask.field_paths.append(FieldPath(*path).to_api_repr())
        if value is DELETE_FIELD:
            continue
        into = nested
        for part in path[:-1]:
            into = into.setdefault(part, {})
        into[path[-1]] = value
    write.update_mask.SetInParent()
    fill_map(write.update, nested)
    write.current_document.update_time.CopyFrom(_timestamp_pb(update_time))
    return write


def _timestamp_pb(when: Any) -> Any:
    """A protobuf Timestamp as given, or a datetime (the library's update times) as the library encodes it."""
    if isinstance(when, datetime):
        from google.cloud.firestore_v1 import _helpers

        return _helpers.encode_value(when)._pb.timestamp_value
    return when


def commit(client: Any, writes: Sequence[Any]) -> Sequence[Any]:
    """One Commit of these protobuf Writes (atomic, in order); their protobuf WriteResults."""
    pb = _types()
    request = pb.CommitRequest(database=client._database_string)
    request.writes.extend(writes)
    response = client._firestore_api.commit(request=pb.commit_request.wrap(request), metadata=client._rpc_metadata)
    results: Sequence[Any] = response._pb.write_results
    return results
