"""`landfall up` / `down` against the real processes: readiness, a clear error for a busy port, nothing left."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.local import processes, stack
from deploy.local.processes import StackError
from deploy.topology import load_topology


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


def test_free_ports_by_one_switch_are_kept_across_down_and_up(tmp_path: Path) -> None:
    """Issue 28 item 10: `landfall up --free-ports` (LANDFALL_PORTS=free, `make demo PORTS=free`) instead of a
    --port flag per service, and the next `up` after `down` reuses the ports the stack had, so a shell that sourced
    .landfall/env keeps reaching it."""
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "LANDFALL_STATE_DIR": str(tmp_path)}
    env.pop(stack.PORTS_ENV, None)

    def landfall(*argv: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "landfall.cli", *argv]
        return subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=300)

    defaults = load_topology().local_ports
    try:
        up = landfall("up", "--free-ports")
        assert up.returncode == 0, up.stderr
        first = {s.name: s.port for s in stack.read_state(tmp_path) if s.port is not None}
        assert set(first) == set(defaults) and all(first[name] != defaults[name] for name in defaults), first
        env_file = (tmp_path / "env").read_text()
        assert landfall("down").returncode == 0
        up = landfall("up")
        assert up.returncode == 0, up.stderr
        assert {s.name: s.port for s in stack.read_state(tmp_path) if s.port is not None} == first
        assert (tmp_path / "env").read_text() == env_file
    finally:
        landfall("down", "--wipe")
    dry = subprocess.run(["make", "-n", "demo", "PORTS=free"], cwd=repo, capture_output=True, text=True, check=True)
    assert f"{stack.PORTS_ENV}=free " in dry.stdout.splitlines()[-1]
