"""What a handler raises: transient errors make the platform redeliver; permanent ones are recorded and acked."""

from __future__ import annotations


class LandfallError(Exception):
    """Base of Landfall's function errors."""


class TransientError(LandfallError):
    """Worth retrying: a dependency is unavailable or the work is in another delivery's hands right now."""


class PermanentError(LandfallError):
    """Retrying cannot help: the input is wrong. The message says what was expected and what to do."""


def as_transient(exc: Exception, what: str) -> Exception:
    """A Google client error that a retry may cure becomes TransientError (naming what failed); others pass as is."""
    from google.api_core import exceptions as gexc

    if isinstance(
        exc,
        gexc.ServiceUnavailable
        | gexc.DeadlineExceeded
        | gexc.InternalServerError
        | gexc.Aborted
        | gexc.TooManyRequests
        | gexc.GatewayTimeout
        | ConnectionError
        | TimeoutError,
    ):
        return TransientError(f"{what} failed ({exc.__class__.__name__}: {exc}); will retry")
    return exc
