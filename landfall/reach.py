"""Before a command talks to the stack, check in about a second that what it needs answers, and otherwise say in one
line why not and what to do.

The client libraries retry an unreachable emulator for a minute or more; a TCP connect with a short timeout answers
at once. When the connect fails, the stack's state file (<state dir>/stack.json) and its processes tell which of
"not started", "partly down", "a shell with an old env" or "up but not answering" it is. Without any emulator
variable the command is aimed at Google Cloud, which is not probed: its calls carry their own deadlines.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from deploy.local.processes import RunningService, is_alive
from landfall.errors import CommandError

EMULATOR_VARIABLES = {
    "pubsub": "PUBSUB_EMULATOR_HOST",
    "firestore": "FIRESTORE_EMULATOR_HOST",
    "storage": "STORAGE_EMULATOR_HOST",
    "vertex": "LANDFALL_VERTEX_ENDPOINT",
}
"""The variable through which clients find each local service (what .landfall/env exports)."""
SERVICE_BEHIND = {"storage": "storage_front"}
"""The stack's service a variable's address is, where it is not the service of that name: clients reach Cloud
Storage through the storage gate (deploy/local_iam/storage_gate.py), which stands before fake-gcs-server."""
CONNECT_TIMEOUT_S = 1.0

Answers = Callable[[str, int], bool]
Alive = Callable[[int], bool]


def port_answers(host: str, port: int) -> bool:
    """True when something accepts a TCP connection at host:port within CONNECT_TIMEOUT_S."""
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return True
    except OSError:
        return False


def host_port(address: str) -> tuple[str, int] | None:
    """('127.0.0.1', 8085) from 127.0.0.1:8085 or http://127.0.0.1:4443; None when there is no port."""
    rest = address.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = rest.rpartition(":")
    return (host.strip("[]"), int(port)) if host and port.isdigit() else None


def check_stack(
    needs: Sequence[str],
    environ: Mapping[str, str],
    state_dir: Path,
    recorded: Sequence[RunningService],
    *,
    answers: Answers = port_answers,
    alive: Alive = is_alive,
) -> None:
    """Raise CommandError, one line with the next step, unless every service in needs can be reached.

    recorded: the services the stack's state file lists (empty when no stack was started)."""
    if not needs:
        return
    if not any(environ.get(var) for var in EMULATOR_VARIABLES.values()):
        if environ.get("GOOGLE_CLOUD_PROJECT"):
            return
        raise CommandError(
            "no local stack is running and GOOGLE_CLOUD_PROJECT is not set: `landfall up` starts the "
            "local stack (for Google Cloud, set GOOGLE_CLOUD_PROJECT)"
        )
    for name in needs:
        var = EMULATOR_VARIABLES[name]
        address = environ.get(var, "")
        where = host_port(address)
        if where is None:
            raise CommandError(
                f"{var} is {'not set' if not address else f'{address!r}, not HOST:PORT'} although "
                f"other local stack variables are: `source {state_dir / 'env'}` again, or `landfall "
                "up` if the stack is not running"
            )
        if not answers(*where):
            raise CommandError(_why_not(name, var, address, where[1], state_dir, recorded, alive))


def _why_not(
    name: str, var: str, address: str, port: int, state_dir: Path, recorded: Sequence[RunningService], alive: Alive
) -> str:
    name = SERVICE_BEHIND.get(name, name)
    service = next((s for s in recorded if s.name == name), None)
    if not recorded or service is None:
        return f"the local stack is not running ({var}={address} does not answer): `landfall up` starts it"
    if not alive(service.pid):
        down = [s.name for s in recorded if not alive(s.pid)]
        return (
            f"the local stack is partly down ({', '.join(down)} not running; log {service.log_path}): "
            "`landfall up` starts again what is down"
        )
    if service.port != port:
        return (
            f"{var}={address} is not the running stack's {name} (127.0.0.1:{service.port}): "
            f"`source {state_dir / 'env'}` again"
        )
    return (
        f"the local stack's {name} (pid {service.pid}) does not answer on {address}; see {service.log_path}, "
        f"or `landfall restart {name}`"
    )
