"""The one RFC 3339 formatter and parser (schemas/times.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from schemas.errors import SchemaError
from schemas.times import format_timestamp, parse_timestamp, parse_timestamp_or_none


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        (datetime(2026, 11, 22, 12, 0, tzinfo=UTC), "2026-11-22T12:00:00.000000Z"),
        (datetime(2026, 11, 22, 12, 0, 0, 5, tzinfo=UTC), "2026-11-22T12:00:00.000005Z"),
        (
            datetime(2026, 11, 22, 13, 30, tzinfo=timezone(timedelta(hours=1, minutes=30))),
            "2026-11-22T12:00:00.000000Z",
        ),
    ],
)
def test_one_fixed_shape_in_utc(moment: datetime, text: str) -> None:
    assert format_timestamp(moment) == text
    assert parse_timestamp(text) == moment


def test_formatted_times_sort_as_text_in_time_order() -> None:
    # The old formatter dropped zero microseconds: "...:00Z" sorted after "...:00.5Z" although it is earlier.
    base = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    moments = [base + timedelta(microseconds=m) for m in (0, 1, 500_000, 999_999, 1_000_000)]
    texts = [format_timestamp(m) for m in moments]
    assert sorted(texts) == texts


def test_naive_times_are_refused_when_written_and_read() -> None:
    with pytest.raises(ValueError, match="no time zone"):
        format_timestamp(datetime(2026, 11, 22, 12, 0))
    with pytest.raises(SchemaError, match=r"deadline: .*no time zone"):
        parse_timestamp("2026-11-22T12:00:00", field="deadline")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-22T12:00:00Z", datetime(2026, 11, 22, 12, 0, tzinfo=UTC)),
        ("2026-11-22T12:00:00.123Z", datetime(2026, 11, 22, 12, 0, 0, 123000, tzinfo=UTC)),
        ("2026-11-22T12:00:00.123456789Z", datetime(2026, 11, 22, 12, 0, 0, 123456, tzinfo=UTC)),
        ("2026-11-22T13:00:00+01:00", datetime(2026, 11, 22, 12, 0, tzinfo=UTC)),
    ],
)
def test_reads_any_rfc3339_time_with_a_zone(text: str, expected: datetime) -> None:
    assert parse_timestamp(text) == expected
    assert parse_timestamp_or_none(text) == expected


@pytest.mark.parametrize("text", ["", "yesterday", "2026-11-22T12:00:00"])
def test_optional_times_that_cannot_be_read_are_none(text: str) -> None:
    assert parse_timestamp_or_none(text) is None
    with pytest.raises(SchemaError, match=r"publish_time: .*(RFC 3339|no time zone)"):
        parse_timestamp(text, field="publish_time")
