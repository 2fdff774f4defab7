"""<state dir>/stack.json: what `landfall up` started and with what, so `restart`, `status` and `down` act on exactly
that; and the lock that keeps two of those commands from changing it at once."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from deploy.local.processes import RunningService


@dataclass(frozen=True)
class StackRecord:
    services: tuple[RunningService, ...]
    """In start order; `down` stops them in reverse."""
    env: dict[str, str]
    """The variables clients use to reach the stack (what <state dir>/env exports)."""
    ports: dict[str, int] = field(default_factory=dict)
    """The port of every service that listens on one, as resolved at `up`."""
    service_env: dict[str, str] = field(default_factory=dict)
    """LANDFALL_* settings `up` found in its environment; every service gets them, also when restarted later."""
    every_seconds: int | None = None
    """The scheduler's LANDFALL_SWEEP_EVERY_SECONDS override at `up`, if any."""

    def service(self, name: str) -> RunningService | None:
        return next((s for s in self.services if s.name == name), None)

    def replacing(self, new: RunningService) -> StackRecord:
        return dataclasses.replace(self, services=tuple(new if s.name == new.name else s for s in self.services))


def _path(state_dir: Path) -> Path:
    return state_dir / "stack.json"


def read(state_dir: Path) -> StackRecord | None:
    path = _path(state_dir)
    if not path.exists():
        return None
    raw = json.loads(path.read_text())
    services = tuple(RunningService(s["name"], s["pid"], s["port"], Path(s["log_path"])) for s in raw["services"])
    return StackRecord(
        services=services,
        env=dict(raw["env"]),
        # A record written before ports were kept: every service's own port is all there is to know.
        ports=dict(raw.get("ports") or {s.name: s.port for s in services if s.port is not None}),
        service_env=dict(raw.get("service_env", {})),
        every_seconds=raw.get("every_seconds"),
    )


def write(state_dir: Path, record: StackRecord) -> None:
    """Replace stack.json atomically."""
    state_dir.mkdir(parents=True, exist_ok=True)
    data = {
        "services": [
            {"name": s.name, "pid": s.pid, "port": s.port, "log_path": str(s.log_path)} for s in record.services
        ],
        "env": record.env,
        "ports": record.ports,
        "service_env": record.service_env,
        "every_seconds": record.every_seconds,
    }
    tmp = _path(state_dir).with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(_path(state_dir))


def remove(state_dir: Path) -> None:
    _path(state_dir).unlink(missing_ok=True)


@contextlib.contextmanager
def locked(state_dir: Path) -> Iterator[None]:
    """Hold <state dir>/stack.lock: one `up`, `down` or `restart` at a time per state folder."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with (state_dir / "stack.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
