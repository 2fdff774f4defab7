"""`landfall up`, `down` and `status`: the whole local stack on loopback, recorded in <state dir>/stack.json."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from deploy.local import processes, provision, services
from deploy.local.processes import RunningService, StackError
from deploy.topology import Topology, load_topology

SERVICE_ORDER = ("pubsub", "firestore", "storage", "vertex", "on_object_finalized", "dispatch", "on_job_event",
                 "sweep_datasets", "scheduler")
"""Every service `up` starts, in start order (`down` stops them in reverse): the functions follow topology.functions."""
PORTLESS_SERVICES = frozenset({"scheduler"})
"""Services that listen on no port: `--port NAME=0` is accepted for them (nothing to pick), any other port refused."""
SWEEP_EVERY_ENV = "LANDFALL_SWEEP_EVERY_SECONDS"
"""Overrides every schedule's every_seconds on the local stack (tests tick every second)."""


@dataclass(frozen=True)
class StackInfo:
    state_dir: Path
    env: dict[str, str]
    services: tuple[RunningService, ...]

    @property
    def env_file(self) -> Path:
        return self.state_dir / "env"


def resolve_ports(topology: Topology, overrides: dict[str, int] | None = None) -> dict[str, int]:
    """The port of every service that listens on one: topology [local.ports], then overrides; 0 = a free port."""
    ports = dict(topology.local_ports)
    for name, port in (overrides or {}).items():
        if name in PORTLESS_SERVICES:
            if port != 0:
                raise StackError(f"{name} listens on no port; --port applies to: {', '.join(ports)}")
            continue
        if name not in ports:
            raise StackError(f"unknown service {name!r} in --port; services with a port: {', '.join(ports)}")
        ports[name] = port
    for name, port in ports.items():
        if port == 0:
            ports[name] = processes.free_port()
    return ports


def stack_env(topology: Topology, ports: dict[str, int]) -> dict[str, str]:
    """The variables every client (functions, trainer, CLI, gcloud) uses to reach the local stack."""
    storage = f"http://{services.HOST}:{ports['storage']}"
    return {
        "GOOGLE_CLOUD_PROJECT": topology.project_id,
        "PUBSUB_EMULATOR_HOST": f"{services.HOST}:{ports['pubsub']}",
        "FIRESTORE_EMULATOR_HOST": f"{services.HOST}:{ports['firestore']}",
        "STORAGE_EMULATOR_HOST": storage,
        "LANDFALL_VERTEX_ENDPOINT": f"{services.HOST}:{ports['vertex']}",
        "LANDFALL_LANDING_BUCKET": topology.bucket,
        # So that `gcloud storage cp FILE gs://...` reaches fake-gcs-server and `gcloud pubsub ...` (publish, pull the
        # dead letters) the Pub/Sub emulator, without credentials.
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE": f"{storage}/storage/v1/",
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB": f"http://{services.HOST}:{ports['pubsub']}/",
        "CLOUDSDK_AUTH_DISABLE_CREDENTIALS": "true",
        "CLOUDSDK_CORE_PROJECT": topology.project_id,
    }


def every_seconds_override(environ: Mapping[str, str]) -> int | None:
    """LANDFALL_SWEEP_EVERY_SECONDS as a whole number of seconds >= 1, or None when unset."""
    raw = environ.get(SWEEP_EVERY_ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise StackError(f"{SWEEP_EVERY_ENV} must be a whole number of seconds >= 1, got {raw!r}; unset it to use "
                         "every_seconds from deploy/topology.toml [schedules.*]")
    return int(raw)


def _state_file(state_dir: Path) -> Path:
    return state_dir / "stack.json"


def read_state(state_dir: Path) -> list[RunningService]:
    path = _state_file(state_dir)
    if not path.exists():
        return []
    raw = json.loads(path.read_text())
    return [RunningService(s["name"], s["pid"], s["port"], Path(s["log_path"])) for s in raw["services"]]


def _write_state(state_dir: Path, running: list[RunningService], env: dict[str, str]) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    data = {"services": [{"name": s.name, "pid": s.pid, "port": s.port, "log_path": str(s.log_path)}
                         for s in running], "env": env}
    tmp = _state_file(state_dir).with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(_state_file(state_dir))


def up(state_dir: Path | None = None, port_overrides: dict[str, int] | None = None) -> StackInfo:
    """Start every service, provision topics/subscriptions/bucket, write <state dir>/env. Idempotent when up."""
    state_dir = state_dir or provision.default_state_dir()
    existing = read_state(state_dir)
    if existing and all(processes.is_alive(s.pid) for s in existing):
        env = json.loads(_state_file(state_dir).read_text())["env"]
        return StackInfo(state_dir, env, tuple(existing))
    if existing:
        raise StackError(f"a previous stack in {state_dir} is partly down; run `landfall down` first")
    topology = load_topology()
    ports = resolve_ports(topology, port_overrides)
    every_seconds = every_seconds_override(os.environ)
    env = stack_env(topology, ports)
    logs = state_dir / "logs"
    running: list[RunningService] = []
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        running += processes.start_all([services.pubsub(ports["pubsub"]), services.firestore(ports["firestore"])],
                                       logs)
        _write_state(state_dir, running, env)
        provision.create_topics(topology, topology.project_id)
        function_env = {**env, "PYTHONUNBUFFERED": "1"}
        specs = [
            services.storage(ports["storage"], project=topology.project_id,
                             notification_topic=topology.notification_topic, bucket=topology.bucket,
                             pubsub_host=env["PUBSUB_EMULATOR_HOST"]),
            services.vertex(ports["vertex"], project=topology.project_id, events_topic=topology.job_events_topic,
                            state_dir=state_dir / "vertex", env=function_env),
            *(services.function(route.name, ports[route.name], function_env) for route in topology.functions),
        ]
        running += processes.start_all(specs, logs)
        _write_state(state_dir, running, env)
        provision.create_push_subscriptions(topology, topology.project_id,
                                            {route.name: ports[route.name] for route in topology.functions})
        provision.create_bucket(topology.bucket, topology.project_id)
        # Last, once the push subscriptions exist, so that no tick is published to a topic nobody reads yet.
        running += processes.start_all([services.scheduler(project=topology.project_id, every_seconds=every_seconds,
                                                           env=function_env)], logs)
        _write_state(state_dir, running, env)
    except BaseException:
        for service in reversed(running):
            processes.stop(service)
        _state_file(state_dir).unlink(missing_ok=True)
        raise
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    (state_dir / "env").write_text("".join(f"export {k}={v}\n" for k, v in env.items()))
    return StackInfo(state_dir, env, tuple(running))


def down(state_dir: Path | None = None) -> list[str]:
    """Stop exactly the processes `up` started (by their recorded process groups); returns their names."""
    state_dir = state_dir or provision.default_state_dir()
    running = read_state(state_dir)
    for service in reversed(running):
        processes.stop(service)
    _state_file(state_dir).unlink(missing_ok=True)
    (state_dir / "env").unlink(missing_ok=True)
    return [s.name for s in running]


def status(state_dir: Path | None = None) -> list[tuple[RunningService, bool]]:
    state_dir = state_dir or provision.default_state_dir()
    return [(s, processes.is_alive(s.pid)) for s in read_state(state_dir)]


@contextmanager
def running_stack(state_dir: Path, port_overrides: dict[str, int] | None = None) -> Iterator[StackInfo]:
    info = up(state_dir, port_overrides)
    try:
        yield info
    finally:
        down(state_dir)
