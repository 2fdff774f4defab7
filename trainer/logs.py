"""One-line JSON log records on stdout, the shape Cloud Logging parses into structured entries.

Cloud Logging reads `severity` and `message` from a JSON line and keeps the other keys as `jsonPayload`.
Every record carries the process's global rank once it is known, so lines from many ranks can be told apart.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

_context: dict[str, Any] = {}


def set_context(**fields: Any) -> None:
    """Fields added to every later record of this process (for instance rank and world_size)."""
    _context.update(fields)


def log(message: str, severity: str = "INFO", **fields: Any) -> None:
    """Print one JSON record and flush, so that a replica killed a moment later still leaves its last line."""
    record = {"severity": severity, "message": message, "time": _timestamp(), **_context, **fields}
    sys.stdout.write(json.dumps(record, default=str, allow_nan=True) + "\n")
    sys.stdout.flush()


def _timestamp() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
