"""Who may call the JobService and the ModelService, and act as the account a job runs as, on the local stack.

Vertex AI checks the caller's permission for each call on the project (`aiplatform.customJobs.create`, `.get`, `.list`,
`.cancel`, `.delete`; `aiplatform.models.upload`, `.get`, `.list`, `.update`, `.delete`), and, for a job that names a
`serviceAccount`, the caller's `iam.serviceAccounts.actAs` on that account: a caller that may create jobs but not act
as the account is refused, so that nobody runs code as an identity they could not use themselves. The emulator asks
the local stack's IAM (the storage gate's check, deploy/local_iam/storage_gate.py, which holds the policy `landfall
deploy` would set) with the caller the call's metadata names (deploy/topology.py PRINCIPAL_METADATA, sent by a
function's channel, functions/gcp/clients.py); a call naming nobody is the project owner's, and an emulator started
without --iam checks nothing.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Sequence

import grpc

CHECK_PATH = "/_landfall/iam/check"
CHECK_TIMEOUT_S = 30.0
KEPT_FOR_S = 5.0
"""How long an answer of the gate stands: a grant changes only with the teams file (a member added), seconds apart."""


class PermissionRefused(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.code = grpc.StatusCode.PERMISSION_DENIED
        self.message = message


class IamCheck:
    """The local stack's IAM, at the storage gate's base URL."""

    def __init__(self, gate: str) -> None:
        self.url = gate.rstrip("/") + CHECK_PATH
        self._kept: dict[tuple[str, str, str, str], tuple[float, bool]] = {}
        self._lock = threading.Lock()

    def allowed(self, member: str, permission: str, kind: str, name: str) -> bool:
        """The gate's answer; for a read (get, list), kept KEPT_FOR_S: a job's state is read again and again by the
        same account. Every other call asks each time, so a grant taken away is refused at once."""
        key = (member, permission, kind, name)
        if not permission.endswith((".get", ".list")):
            return self._ask(key)
        with self._lock:
            kept = self._kept.get(key)
        if kept is not None and time.monotonic() - kept[0] < KEPT_FOR_S:
            return kept[1]
        allowed = self._ask(key)
        with self._lock:
            if len(self._kept) > 4096:
                self._kept.clear()
            self._kept[key] = (time.monotonic(), allowed)
        return allowed

    def _ask(self, key: tuple[str, str, str, str]) -> bool:
        member, permission, kind, name = key
        body = json.dumps({"member": member, "permission": permission, "kind": kind, "name": name}).encode()
        request = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=CHECK_TIMEOUT_S) as answer:
            return bool(json.loads(answer.read())["allowed"])

    def require(self, member: str, permission: str, project: str, location: str, service_account: str = "") -> None:
        """Raise PermissionRefused, in Vertex AI's words, unless member holds permission on the project, and (given
        service_account) may act as that account."""
        if not member:
            return
        if not self.allowed(member, permission, "project", project):
            raise PermissionRefused(
                f"Permission '{permission}' denied on resource '//aiplatform.googleapis.com/projects/{project}/"
                f"locations/{location}' (or it may not exist)."
            )
        if service_account and not self.allowed(
            member, "iam.serviceAccounts.actAs", "service_account", service_account
        ):
            raise PermissionRefused(
                f"The caller {member} does not have permission to act as service account {service_account}: "
                f"Permission 'iam.serviceAccounts.actAs' denied on resource "
                f"'projects/-/serviceAccounts/{service_account}' (or it may not exist)."
            )


def caller(metadata: Sequence[tuple[str, str | bytes]] | None, key: str) -> str:
    """The member a call's metadata names ("" none)."""
    for name, value in metadata or ():
        if name == key:
            return value.decode() if isinstance(value, bytes) else value
    return ""


__all__ = ["CHECK_PATH", "IamCheck", "PermissionRefused", "caller"]
