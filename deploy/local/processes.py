"""Start a background service in its own process group, wait for its readiness signal, stop exactly it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


class StackError(RuntimeError):
    """A local service could not be started, or is not answering. The message says which and what to do."""


Probe = Callable[[], bool]


@dataclass(frozen=True)
class ServiceSpec:
    """How to run one service and how to tell it is ready."""

    name: str
    argv: Sequence[str]
    port: int | None
    """The TCP port it listens on (checked free before start); None for a service that listens on none."""
    env: dict[str, str] = field(default_factory=dict)
    ready_log_line: str | None = None
    ready_probe: Probe | None = None
    startup_timeout_s: float = 60.0


@dataclass(frozen=True)
class RunningService:
    name: str
    pid: int
    port: int | None
    log_path: Path


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when a server could listen on host:port now. The probe binds with SO_REUSEADDR, as every server of the
    stack does, so connections of a stopped server that linger in TIME-WAIT do not make its port look taken; a
    socket listening there still does."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def http_answers(url: str) -> Probe:
    """A probe that is true once anything answers HTTP at url (any status code counts as up)."""

    def probe() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return True
        except urllib.error.HTTPError:
            return True
        except (urllib.error.URLError, OSError):
            return False

    return probe


def start(spec: ServiceSpec, log_dir: Path, *, append: bool = False) -> RunningService:
    """Start spec in a new session (so its children can be stopped with it) and block until it is ready."""
    return start_all([spec], log_dir, append=append)[0]


def start_all(specs: Sequence[ServiceSpec], log_dir: Path, *, append: bool = False) -> list[RunningService]:
    """Launch every spec at once, then wait for each to be ready; on any failure stop all that were started.
    With append, each log keeps what it holds (a restart) and readiness is read only from what follows."""
    launched: list[tuple[ServiceSpec, RunningService, subprocess.Popen[bytes], int]] = []
    try:
        for spec in specs:
            launched.append((spec, *_launch(spec, log_dir, append)))
        for spec, service, proc, log_offset in launched:
            _wait_ready(spec, service, proc, log_offset)
    except BaseException:
        for _, service, _proc, _offset in launched:
            stop(service)
        raise
    return [service for _, service, _, _ in launched]


def _launch(spec: ServiceSpec, log_dir: Path, append: bool) -> tuple[RunningService, subprocess.Popen[bytes], int]:
    if spec.port is not None and not port_is_free(spec.port):
        raise StackError(
            f"{spec.name}: port {spec.port} on 127.0.0.1 is already in use. Stop what holds it "
            f"(`ss -ltnp 'sport = :{spec.port}'`), or pick another port with `--port {spec.name}=PORT`."
        )
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{spec.name}.log"
    with log_path.open("ab" if append else "wb") as log:
        offset = log.tell()
        proc = subprocess.Popen(
            list(spec.argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **spec.env},
            start_new_session=True,
        )
    return RunningService(spec.name, proc.pid, spec.port, log_path), proc, offset


def _wait_ready(spec: ServiceSpec, service: RunningService, proc: subprocess.Popen[bytes], log_offset: int) -> None:
    log_path = service.log_path
    deadline = time.monotonic() + spec.startup_timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StackError(
                f"{spec.name} exited with status {proc.returncode} while starting; see {log_path}:\n{_tail(log_path)}"
            )
        if _is_ready(spec, log_path, log_offset):
            return
        time.sleep(0.1)
    raise StackError(
        f"{spec.name} was not ready after {spec.startup_timeout_s:.0f}s; see {log_path}:\n{_tail(log_path)}"
    )


def _is_ready(spec: ServiceSpec, log_path: Path, log_offset: int) -> bool:
    if spec.ready_log_line is not None and spec.ready_log_line not in _read_from(log_path, log_offset):
        return False
    return spec.ready_probe is None or spec.ready_probe()


def _read_from(path: Path, offset: int) -> str:
    with path.open("rb") as log:
        log.seek(offset)
        return log.read().decode(errors="replace")


def _tail(path: Path, lines: int = 15) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped by its parent) is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return True


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return any(_pgid_of(pid) == pgid and is_alive(pid) for pid in _all_pids())


def _all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _pgid_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def stop(service: RunningService, timeout_s: float = 10.0) -> None:
    """SIGTERM the service's process group (its pid is the group id), then SIGKILL what is left after timeout."""
    stop_all([service], timeout_s)


def stop_all(services: Sequence[RunningService], timeout_s: float = 10.0) -> None:
    """Stop several services at once: SIGTERM every group, wait for all, then SIGKILL the groups left. Returns once
    their ports are free too (at most timeout_s more): a process may be reaped before the kernel has closed its
    listening socket, and a restart on the same port must not find it taken."""
    left = [service.pid for service in services]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in left:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, sig)
        deadline = time.monotonic() + timeout_s
        while left and time.monotonic() < deadline:
            for pgid in left:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pgid, os.WNOHANG)
            left = [pgid for pgid in left if group_alive(pgid)]
            if left:
                time.sleep(0.05)
        if not left:
            break
    ports = [service.port for service in services if service.port is not None]
    deadline = time.monotonic() + timeout_s
    while ports and time.monotonic() < deadline:
        ports = [port for port in ports if not port_is_free(port)]
        if ports:
            time.sleep(0.05)
