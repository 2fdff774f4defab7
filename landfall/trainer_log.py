"""Reading the trainer's log records (trainer/logs.py: one JSON object a line, `severity`, `message`, `time` and the
record's own fields) as a person does: `landfall logs` prints them as text, `landfall watch` reads progress and what
the trainer is doing from them."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

CONTEXT_FIELDS = frozenset({"severity", "message", "time", "rank", "world_size"})
"""Fields every record carries (trainer/logs.py); the text form shows them in its columns, not after the message."""


def parse_record(line: str) -> dict[str, Any] | None:
    """The JSON record on this line, or None for any other line (a traceback, a library's own print)."""
    if not line.startswith("{"):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("message"), str) else None


def record_time(record: dict[str, Any]) -> datetime | None:
    """The record's `time` (RFC 3339, UTC), or None when it has none that reads."""
    raw = record.get("time")
    if not isinstance(raw, str):
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None


SHORT_VALUE = 48
"""Characters of a field's value `landfall watch` shows (a digest or an environment is cut with '...')."""


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, str):
        return value if value and " " not in value else json.dumps(value)
    return json.dumps(value, separators=(",", ":"), default=str)


def short_value(value: Any, width: int = SHORT_VALUE) -> str:
    """A field's value as text (floats to 4 significant digits), cut to width characters."""
    text = _value(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def text_line(replica: str, line: str) -> str:
    """One replica log line as text: `TIME  REPLICA  [SEVERITY ]MESSAGE  key=value ...`; a line that is not a
    record keeps its text, after blank time and the replica."""
    record = parse_record(line)
    if record is None:
        return f"{'':<23}  {replica}  {line}"
    when = record_time(record)
    stamp = when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:23] if when else "?"
    severity = record.get("severity")
    level = f"{severity} " if isinstance(severity, str) and severity not in ("INFO", "DEFAULT", "DEBUG") else ""
    fields = "  ".join(f"{k}={_value(v)}" for k, v in record.items() if k not in CONTEXT_FIELDS)
    return f"{stamp:<23}  {replica}  {level}{record['message']}" + (f"  {fields}" if fields else "")
