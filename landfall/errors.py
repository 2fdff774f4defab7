"""The CLI's one user-facing error: a line that says what is wrong and what to do next, never a traceback.

Commands raise CommandError (or let `client_boundary` translate a client library's error into one); `landfall.cli`
prints it as `landfall COMMAND: message` and exits 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

CLOUD_HINT = (
    "on the local stack check `landfall status` (the CLI reads .landfall/env); in Google Cloud check "
    "GOOGLE_CLOUD_PROJECT and your credentials (`gcloud auth application-default login`)"
)


class CommandError(RuntimeError):
    """A command cannot go on: bad input, or a service it needs cannot be reached. The message is one line."""


def reason(exc: BaseException) -> str:
    """An exception as text, never empty (a timed-out future's TimeoutError has no message)."""
    text = " ".join(str(exc).split())
    return text or f"{type(exc).__name__} (no answer in time)"


@contextmanager
def client_boundary(what: str) -> Iterator[None]:
    """Settings and Google client failures inside the block become one CommandError: what could not be done, why,
    and what to check."""
    from google.api_core.exceptions import GoogleAPIError
    from google.auth.exceptions import GoogleAuthError

    from functions.settings import SettingsError

    try:
        yield
    except SettingsError as exc:
        raise CommandError(str(exc)) from exc
    except (GoogleAPIError, GoogleAuthError, TimeoutError) as exc:
        raise CommandError(f"cannot {what}: {reason(exc)}; {CLOUD_HINT}") from exc
