"""functions/gcp/firestore_writes.py encodes values as the client library does: for any value a Landfall document
can hold, the protobuf `Value` it fills is the one `google.cloud.firestore_v1._helpers.encode_value` builds, and a
conditional update's Write is the library's update Write with the same precondition."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from google.cloud import firestore
from google.cloud.firestore_v1 import _helpers
from google.cloud.firestore_v1.types import document, write
from google.cloud.firestore_v1.types import firestore as firestore_types
from hypothesis import given, settings
from hypothesis import strategies as st

from functions.gcp import firestore_writes
from functions.gcp.firestore_tx import changed_fields, changed_paths

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    INT64,
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=8),
    st.datetimes(timezones=st.just(UTC)),
    st.datetimes(),  # naive: read as local time, by the library and here alike
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.text(min_size=1, max_size=8), inner, max_size=4),
    ),
    max_leaves=30,
)


def _filled(value: Any) -> Any:
    target = document.Value.pb()()
    firestore_writes.fill(target, value)
    return target


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_every_value_is_encoded_as_the_library_encodes_it(value: Any) -> None:
    assert _filled(value) == _helpers.encode_value(value)._pb


def test_empty_containers_and_nan_and_the_int64_bounds_are_encoded_as_the_library_does() -> None:
    from google.api_core.datetime_helpers import DatetimeWithNanoseconds

    nanos = DatetimeWithNanoseconds(2026, 11, 27, 7, 30, 0, nanosecond=123456789, tzinfo=UTC)
    edges: list[Any] = [{}, [], (), {"a": {}}, {"a": []}, float("nan"), float("inf"), 2**63 - 1, -(2**63), 0.0, -0.0]
    edges += [nanos, datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC), datetime(1, 1, 1, tzinfo=UTC)]
    for value in edges:
        assert _filled(value).SerializeToString() == _helpers.encode_value(value)._pb.SerializeToString(), value


def test_an_integer_past_int64_is_refused_as_the_library_refuses_it() -> None:
    try:
        _helpers.encode_value(2**63)
    except Exception as library:
        expected: type[Exception] = type(library)
    try:
        _filled(2**63)
    except Exception as ours:
        assert isinstance(ours, expected | ValueError)
    else:
        raise AssertionError("2**63 was encoded")


class _Ref:
    _document_path = "projects/p/databases/(default)/documents/runs/r1"


def test_a_conditional_update_is_the_librarys_update_write_with_that_precondition() -> None:
    current = {"state": "RECEIVED", "plan": None, "a": {"b": 1, "c": [1, 2], "gone": True}, "x.y": 1}
    new = {"state": "PLANNED", "plan": {"region": "us-central1", "n": 2}, "a": {"b": 1.0, "c": [1, 2]}, "x.y": 2}
    when = datetime(2026, 11, 27, 5, 0, 0, 123456, tzinfo=UTC)
    sent: list[Any] = []

    class Api:
        def commit(self, request: Any, metadata: Any) -> Any:
            sent.append(request._pb)
            answer = firestore_types.CommitResponse(write_results=[write.WriteResult(update_time=when)])
            return answer

    client = firestore.Client(project="p", credentials=_anonymous())
    fake = type("C", (), {"_database_string": client._database_string, "_rpc_metadata": (), "_firestore_api": Api()})()
    stamp, others = firestore_writes.update_if_unchanged(fake, _Ref(), changed_paths(current, new), when)
    assert others == []
    assert stamp == _helpers.encode_value(when)._pb.timestamp_value
    (request,) = sent
    (ours,) = request.writes
    batch = client.batch()
    batch.update(
        client.document("runs/r1"), changed_fields(current, new), option=client.write_option(last_update_time=when)
    )
    (library,) = [w._pb if hasattr(w, "_pb") else w for w in batch._write_pbs]
    assert sorted(ours.update_mask.field_paths) == sorted(library.update_mask.field_paths)
    assert ours.update == library.update
    assert ours.current_document == library.current_document
    assert request.database == client._database_string


def _anonymous() -> Any:
    from google.auth.credentials import AnonymousCredentials

    return AnonymousCredentials()
