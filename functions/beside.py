"""Reads a delivery starts on another thread while its own thread waits on a call of its own, so that two round
trips on a delivery's way take the time of one (ingest's object stat beside its outbox read; the dispatcher's
measurements query beside the run's create).

Only reads go beside: what they return is asked for later (`Future.result()`, which raises the read's own error), or
never, and a read nobody asks for ends unseen. The pool is the instance's, started when first used.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

THREADS = 4
"""Threads an instance keeps for reads beside its deliveries."""

_POOL: ThreadPoolExecutor | None = None
_LOCK = threading.Lock()


def beside(read: Callable[[], T]) -> Future[T]:
    """Start read on another thread; its result (or its error) when asked."""
    global _POOL
    with _LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(THREADS, thread_name_prefix="landfall-read")
    return _POOL.submit(read)
