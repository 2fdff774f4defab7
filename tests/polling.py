"""The one polling helper of the test suites: wait on a readiness signal, never a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal, TypeVar

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T | Literal[False] | None],
    timeout: float = 60.0,
    what: str = "condition",
    step: float = 0.05,
) -> T:
    """Poll condition until it returns something truthy (and return it); fail naming `what` after timeout s.
    Typed by what condition returns when it is ready: a `Job | None` condition gives a Job."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
