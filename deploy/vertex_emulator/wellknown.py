"""A CustomJob's Timestamp and Duration fields as the Python values proto-plus makes of them.

proto-plus marshals google.protobuf.Timestamp fields to datetimes (an unset one reads as None) and Duration fields
to timedeltas (an unset one reads as zero), while the SDK annotates those fields with the protobuf message types.
These functions are the one place that converts between the two, so the rest of the emulator is checked against
what the fields really hold.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from google.protobuf import duration_pb2, timestamp_pb2


def timestamp(moment: datetime) -> timestamp_pb2.Timestamp:
    """A timezone-aware moment as the message a Timestamp field stores (what proto-plus makes of a datetime)."""
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(moment)
    return stamp


def time_of(field: timestamp_pb2.Timestamp) -> datetime | None:
    """A Timestamp field as proto-plus reads it: a datetime, or None when the field is unset."""
    value: object = field
    if value is None or isinstance(value, datetime):
        return value
    raise TypeError(f"expected proto-plus to read a Timestamp field as a datetime, got {type(value).__name__}")


def duration_of(field: duration_pb2.Duration) -> timedelta | None:
    """A Duration field as proto-plus reads it: a timedelta (zero when the field is unset; None is allowed too)."""
    value: object = field
    if value is None or isinstance(value, timedelta):
        return value
    raise TypeError(f"expected proto-plus to read a Duration field as a timedelta, got {type(value).__name__}")
