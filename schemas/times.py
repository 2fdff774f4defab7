"""RFC 3339 times: the one formatter and the one parser every part of Landfall uses for stored and sent times.

Landfall writes one fixed shape, UTC with microseconds and `Z` (`2026-11-22T12:00:00.000000Z`), so that stored
times sort as text in time order. It reads any RFC 3339 time with a zone (`Z` or an offset, any number of
fraction digits; nanoseconds are cut to microseconds).
"""

from __future__ import annotations

from datetime import UTC, datetime

from schemas.errors import SchemaError

EXAMPLE = "2026-11-22T18:00:00Z"


def format_timestamp(moment: datetime) -> str:
    """`moment` in UTC as YYYY-MM-DDTHH:MM:SS.ffffffZ (always microseconds, so the text sorts like the time)."""
    if moment.tzinfo is None:
        raise ValueError(f"{moment!r} has no time zone; pass an aware datetime such as datetime.now(UTC)")
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def parse_timestamp(value: str, *, field: str = "time") -> datetime:
    """An RFC 3339 time with a zone; raises SchemaError naming `field` and showing the expected shape."""
    try:
        parsed = datetime.fromisoformat(value)
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"{value!r} is not an RFC 3339 timestamp such as {EXAMPLE}", field=field) from exc
    if parsed.tzinfo is None:
        raise SchemaError(f"{value!r} has no time zone; add Z or an offset such as +01:00", field=field)
    try:
        parsed.astimezone(UTC)  # 9999-12-31T23:59:59-01:00 is past the last time Python (and Landfall) can hold
    except OverflowError:
        raise SchemaError(f"{value!r} is outside the years 1 to 9999 once converted to UTC", field=field) from None
    return parsed


def parse_timestamp_or_none(value: str) -> datetime | None:
    """The time `value` names, or None when it is empty or not an RFC 3339 time with a zone (for optional,
    best-effort times such as a Pub/Sub publish time or a job's start time)."""
    if not value:
        return None
    try:
        return parse_timestamp(value)
    except SchemaError:
        return None


__all__ = ["format_timestamp", "parse_timestamp", "parse_timestamp_or_none"]
