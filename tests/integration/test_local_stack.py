"""`landfall up` / `down` against the real processes: readiness, a clear error for a busy port, nothing left."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from deploy.local import processes, stack
from deploy.local.processes import StackError
from deploy.topology import load_topology

REPO = Path(__file__).resolve().parents[2]


def test_busy_port_gives_a_clear_error_and_starts_nothing(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        ports = {name: 0 for name in stack.SERVICE_ORDER} | {"pubsub": busy}
        with pytest.raises(StackError, match=rf"pubsub: port {busy} on 127.0.0.1 is already in use.*--port pubsub="):
            stack.up(tmp_path, ports)
    assert stack.read_state(tmp_path) == []


def test_down_stops_exactly_what_up_started_and_the_next_up_reuses_its_free_ports(tmp_path: Path) -> None:
    """Also one switch for free ports (`landfall up --free-ports`, LANDFALL_PORTS=free, `make demo
    PORTS=free`) instead of a --port flag per service, and the next `up` after `down` reuses the ports the stack
    had, so a shell that sourced .landfall/env keeps reaching it."""
    info = stack.up(tmp_path, ports="free")
    try:
        assert [s.name for s in info.services] == list(stack.SERVICE_ORDER)
        assert all(alive for _, alive in stack.status(tmp_path))
        ports = {s.name: s.port for s in stack.read_state(tmp_path)}
        assert ports["scheduler"] is None and isinstance(ports["sweep_datasets"], int)
        assert processes.http_answers(f"http://127.0.0.1:{ports['sweep_datasets']}/")()
        env = info.env_file.read_text()
        for name in (
            "PUBSUB_EMULATOR_HOST",
            "FIRESTORE_EMULATOR_HOST",
            "STORAGE_EMULATOR_HOST",
            "GOOGLE_CLOUD_PROJECT",
            "LANDFALL_VERTEX_ENDPOINT",
            "LANDFALL_LANDING_BUCKET",
        ):
            assert f"export {name}=" in env
        again = stack.up(tmp_path)
        assert [s.pid for s in again.services] == [s.pid for s in info.services]
    finally:
        stopped = stack.down(tmp_path)
    assert stopped == list(stack.SERVICE_ORDER)
    for service in info.services:
        assert not processes.group_alive(service.pid), f"{service.name} (pgid {service.pid}) left processes behind"
    assert stack.status(tmp_path) == []

    defaults = load_topology().local_ports
    first = {s.name: s.port for s in info.services if s.port is not None}
    assert set(first) == set(defaults) and all(first[name] != defaults[name] for name in defaults), first
    try:
        again = stack.up(tmp_path)  # no switch: the ports the last stack here used
        assert {s.name: s.port for s in again.services if s.port is not None} == first
        assert again.env == info.env
    finally:
        stack.down(tmp_path, wipe=True)
    # --no-print-directory: under `make test` this make is a sub-make, which would print "Leaving directory" last
    dry = subprocess.run(
        ["make", "--no-print-directory", "-n", "demo", "PORTS=free"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"{stack.PORTS_ENV}=free " in dry.stdout.splitlines()[-1]
