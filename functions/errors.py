"""What a handler raises: transient errors make the platform redeliver; permanent ones are recorded and acked."""

from __future__ import annotations

import re


class LandfallError(Exception):
    """Base of Landfall's function errors."""


class TransientError(LandfallError):
    """Worth retrying: a dependency is unavailable or the work is in another delivery's hands right now."""


class PermanentError(LandfallError):
    """Retrying cannot help: the input is wrong. The message says what was expected and what to do."""


class MissingPermission(PermanentError):
    """Google refused a call for want of an IAM permission (PermissionDenied, HTTP 403). Permanent, except in the
    minutes after a deploy while new grants propagate (Settings.grants_settling): the entry points and the dispatcher
    retry it then."""

    def __init__(self, message: str, permission: str = "") -> None:
        super().__init__(message)
        self.permission = permission


_NAMED = re.compile(r"[Pp]ermission '?\"?([a-z]+(?:\.[a-zA-Z]+){1,3})'?\"?")


def denied_permission(message: str) -> str:
    """The IAM permission a 403's message names ("Permission 'aiplatform.customJobs.create' denied", "... does not
    have storage.objects.create access to ..."), or "" when it names none."""
    named = _NAMED.search(message) or re.search(r"have ([a-z]+(?:\.[a-zA-Z]+){1,3}) access", message)
    return named.group(1) if named else ""


def missing_permission(exc: Exception, what: str) -> MissingPermission:
    """A 403 as MissingPermission, saying which permission to grant (when the message names it) and to whom."""
    message = str(getattr(exc, "message", None) or exc)
    permission = denied_permission(message)
    grant = (
        f"grant {permission} (a role that holds it) to the function's service account"
        if permission
        else "grant the function's service account the role this call needs"
    )
    return MissingPermission(
        f"{what} was refused for want of a permission ({message}); {grant}: `landfall deploy` makes the grants "
        "deploy/topology.toml lists for each account, and a new grant takes minutes to reach every service",
        permission,
    )


def as_transient(exc: Exception, what: str) -> Exception:
    """A Google client error that a retry may cure becomes TransientError (naming what failed); a refused permission
    MissingPermission (naming it); others pass as is."""
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
    if isinstance(exc, gexc.PermissionDenied | gexc.Forbidden):
        return missing_permission(exc, what)
    return exc
