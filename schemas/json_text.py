"""JSON text from outside (messages, log entries, manifests, landfall.json), read with every failure one error type.

`json.loads` fails in more ways than JSONDecodeError: a ValueError for an integer longer than 4,300 digits, a
RecursionError for arrays or objects nested about a thousand deep, a UnicodeDecodeError for bytes that are not
UTF-8. And it accepts a lone surrogate escape ("\\ud800"), a string that no UTF-8 encoder (hashlib's `.encode()`,
Firestore, Pub/Sub) can write back. `loads` turns each into JsonTextError saying which, so a caller refuses the
input with a reason instead of crashing on it (and having it redelivered).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from schemas.errors import SchemaError


class JsonTextError(ValueError):
    """The text is not JSON Landfall can read; the message says what is wrong with it."""


def loads(raw: bytes | str) -> object:
    """The JSON value in raw; JsonTextError when it is not JSON, too deep, or holds text that is not Unicode."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise JsonTextError(
            "it is nested too deeply to read (arrays or objects about a thousand levels deep)"
        ) from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer too long to convert
        raise JsonTextError(str(exc)[:200]) from exc
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")  # the one walk that finds a lone surrogate fast
    except RecursionError:
        raise JsonTextError(
            "it is nested too deeply to read (arrays or objects about a thousand levels deep)"
        ) from None
    except UnicodeEncodeError as exc:
        raise JsonTextError(
            f"it holds a lone surrogate escape ({exc.object[exc.start : exc.end]!r}), which is not "
            "text; write characters, not halves of a UTF-16 pair"
        ) from None
    return value


__all__ = ["JsonTextError", "loads"]


def packaged_object(name: str) -> dict[str, Any]:
    """The JSON object of schemas/data/NAME, the data files packaged with Landfall; SchemaError naming the file when
    it is not valid JSON or not an object."""
    text = resources.files("schemas").joinpath("data", name).read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{name} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise SchemaError(f"{name}: expected a JSON object at the top, got {type(data).__name__}")
    return data
