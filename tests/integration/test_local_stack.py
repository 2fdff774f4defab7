"""`landfall up` / `down` against the real processes: readiness, a clear error for a busy port, nothing left."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from deploy.local import processes, stack
from deploy.local.processes import StackError


def test_busy_port_gives_a_clear_error_and_starts_nothing(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        ports = {name: 0 for name in stack.SERVICE_ORDER} | {"pubsub": busy}
        with pytest.raises(StackError, match=rf"pubsub: port {busy} on 127.0.0.1 is already in use.*--port pubsub="):
            stack.up(tmp_path, ports)
    assert stack.read_state(tmp_path) == []


def test_down_stops_exactly_what_up_started(tmp_path: Path) -> None:
    info = stack.up(tmp_path, {name: 0 for name in stack.SERVICE_ORDER})
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
