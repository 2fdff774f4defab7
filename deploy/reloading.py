"""A configuration file read again when it changes: the routes and teams files take effect without a restart.

The rule (docs/ingest.md, "Editing routes.toml"): a read looks at the file's signature (modification time in ns,
size, inode) at most once per `interval` seconds and otherwise returns the parsed value it holds; a changed
signature parses the file again. A changed file that no longer parses keeps the last good value and logs one error
naming the file and the problem (once per bad edit); only a file that never parsed raises. In a deployment the file
is bundled with the function, so the signature never changes: the same path costs one stat a second.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")
log = logging.getLogger("landfall.config")

CHECK_INTERVAL_SECONDS = 1.0
"""How often a read may look at the file again."""

Signature = tuple[int, int, int] | None
"""(mtime_ns, size, inode) of a file on disk; None for a resource that is not a plain file (it never changes)."""


def signature(path: Traversable | Path) -> Signature:
    """The file's (mtime_ns, size, inode); None for a resource outside the file system; (-1, -1, -1) when missing."""
    if not isinstance(path, Path):
        return None
    try:
        st = os.stat(path)
    except OSError:
        return (-1, -1, -1)
    return (st.st_mtime_ns, st.st_size, st.st_ino)


@dataclass
class _Held(Generic[T]):
    value: T
    seen: Signature
    checked_at: float


class ReloadingFile(Generic[T]):
    """Parsed values of files by path, each parsed again when its file changes (see the module docstring).
    Thread-safe: one lock guards the check and the parse."""

    def __init__(
        self,
        parse: Callable[[Traversable | Path], T],
        errors: tuple[type[Exception], ...],
        interval: float = CHECK_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._parse = parse
        self._errors = errors
        self._interval = interval
        self._clock = clock
        self._held: dict[str, _Held[T]] = {}
        self._lock = threading.Lock()

    def read(self, path: Traversable | Path) -> T:
        """The file's parsed value: the held one unless the file changed since the last check. Raises the parser's
        error only when the file has never parsed; a broken edit of a file that parsed keeps the last good value."""
        key = str(path)
        with self._lock:
            now = self._clock()
            held = self._held.get(key)
            if held is not None and now - held.checked_at < self._interval:
                return held.value
            seen = signature(path)
            if held is not None and seen == held.seen:
                held.checked_at = now
                return held.value
            try:
                value = self._parse(path)
            except self._errors as exc:
                if held is None:
                    raise
                log.error(
                    "%s changed but cannot be used, so the last good version stays in effect: %s; fix the file "
                    "(it is read again when it changes)",
                    key,
                    exc,
                )
                held.seen, held.checked_at = seen, now  # one error per bad edit
                return held.value
            if held is not None:
                log.info("%s changed: read again", key)
            self._held[key] = _Held(value, seen, now)
            return value

    def cache_clear(self) -> None:
        """Forget every held value (tests; a changed settings file)."""
        with self._lock:
            self._held.clear()
