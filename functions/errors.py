"""What a handler raises: transient errors make the platform redeliver; permanent ones are recorded and acked."""

from __future__ import annotations


class LandfallError(Exception):
    """Base of Landfall's function errors."""


class TransientError(LandfallError):
    """Worth retrying: a dependency is unavailable or the work is in another delivery's hands right now."""


class PermanentError(LandfallError):
    """Retrying cannot help: the input is wrong. The message says what was expected and what to do."""
