"""`landfall up`, `down`, `restart` and `status`: the whole local stack on loopback, recorded in
<state dir>/stack.json (deploy/local/record.py); what it keeps across restarts is deploy/local/persistence.py."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from deploy.local import persistence, processes, provision, record, services
from deploy.local.processes import RunningService, ServiceSpec, StackError
from deploy.local.record import StackRecord
from deploy.topology import (
    PUBSUB_GATE_ENV,
    Topology,
    account_email,
    artifacts_bucket,
    function_account,
    load_topology,
    storage_as,
)

STAGES = (
    ("pubsub", "firestore"),
    ("storage", "storage_front", "pubsub_front", "vertex", *(route.name for route in load_topology().functions)),
    ("bridge", "scheduler"),
)
"""`up` starts each group at once, the groups in order. Topics and subscriptions are created after the first group
(so no notification or job event is published to a topic nobody reads), the bucket after the second; the bridge and
the scheduler come last, once there is something to push to and read from."""
SERVICE_ORDER = tuple(name for stage in STAGES for name in stage)
"""Every service `up` starts, in start order (`down` stops them in reverse): the functions are topology.functions."""
PORTLESS_SERVICES = frozenset({"bridge", "scheduler"})
"""Services that listen on no port: `--port NAME=0` is accepted for them (nothing to pick), any other port refused."""
SWEEP_EVERY_ENV = "LANDFALL_SWEEP_EVERY_SECONDS"
"""Overrides every schedule's every_seconds on the local stack (tests tick every second)."""
PORTS_ENV = "LANDFALL_PORTS"
"""Which ports `up` (and `landfall demo`, `make demo PORTS=free`) gives a stack it starts: "free" (a free port for
every service), "default" (deploy/topology.toml [local.ports]); unset: the ports the last stack in this state folder
used (ports.json), else the topology's. `--port NAME=PORT` wins over all of them."""
PORT_MODES = ("free", "default")
PORTS_FILE = "ports.json"
"""<state dir>/ports.json: the ports the last stack started here used, kept across `down` (and `down --wipe`), so
the next `up` gives clients the same addresses."""
JOB_REGIONS_ENV = "LANDFALL_JOB_REGIONS"
"""Regions besides the default one the stack's jobs may run in (`us-east4,europe-west4`), read at `up`."""
LOCAL_IAM_ENV = "LANDFALL_LOCAL_IAM"
"""`off`: the storage gate records what each identity uses but refuses nothing (on by default: every Cloud Storage
call is checked against the deploy's IAM policy, deploy/local_iam/storage_gate.py)."""
IAM_RECORD = "iam-used.jsonl"
"""In the state folder: every permission each identity used on the stack's Cloud Storage, and the grant that allowed
it (or that none did)."""
TRAINER_ACCOUNT = "trainer"
"""The [gcp.service_accounts] key jobs of no team run as."""
VERTEX_IMAGES_ENV = "LANDFALL_VERTEX_IMAGES"
"""A JSON file the Vertex emulator reads as its --images map (container image URI -> local entrypoint), e.g. the
trainer image mapped to a no-op by the load test (bench/local_stack); unset: the emulator runs the real trainer."""
VERTEX_FAULTS_ENV = "LANDFALL_VERTEX_FAULTS"
"""A fault plan file (JSON or TOML, docs/vertex_emulator.md) the Vertex emulator reads as its --faults, e.g. Vertex's
rate limits for a load test (`[[rate_limits]]`); unset: no faults until a control call sets some."""


@dataclass(frozen=True)
class StackInfo:
    state_dir: Path
    env: dict[str, str]
    services: tuple[RunningService, ...]
    restarted: tuple[str, ...] = field(default=())
    """Services that `up` found down on a running stack and started again."""

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


def ports_mode(environ: Mapping[str, str], flag: str | None = None) -> str | None:
    """The port choice: the flag's, else LANDFALL_PORTS (free or default), else None (the remembered ports)."""
    raw = (flag or environ.get(PORTS_ENV, "")).strip().lower()
    if raw and raw not in PORT_MODES:
        raise StackError(
            f"{PORTS_ENV} must be one of {', '.join(PORT_MODES)}, got {raw!r}: free picks a free port for every "
            "service, default uses deploy/topology.toml [local.ports]; unset it to reuse the last stack's ports"
        )
    return raw or None


def remembered_ports(state_dir: Path) -> tuple[dict[str, int], frozenset[str]] | None:
    """The ports the last stack in state_dir used and the services whose port was picked free; None when none is
    kept."""
    import json

    try:
        raw = json.loads((state_dir / PORTS_FILE).read_text())
        return {str(k): int(v) for k, v in raw["ports"].items()}, frozenset(map(str, raw.get("picked_free", ())))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def remember_ports(state_dir: Path, ports: Mapping[str, int], picked_free: frozenset[str]) -> None:
    import json

    tmp = state_dir / f"{PORTS_FILE}.tmp"
    tmp.write_text(json.dumps({"ports": dict(ports), "picked_free": sorted(picked_free)}, indent=2))
    tmp.replace(state_dir / PORTS_FILE)


def base_ports(topology: Topology, state_dir: Path, mode: str | None) -> dict[str, int]:
    """The ports a stack starts from before any --port (0: a free port is picked): every one free, the topology's,
    or the last stack's here (a port it had picked free that is taken now is picked afresh; one that was chosen is
    kept, and `up` says when it is in use)."""
    if mode == "free":
        return {name: 0 for name in topology.local_ports}
    last = None if mode == "default" else remembered_ports(state_dir)
    if last is None or set(last[0]) != set(topology.local_ports):
        return dict(topology.local_ports)
    ports, picked_free = last
    return {
        name: 0 if name in picked_free and not processes.port_is_free(port) else port for name, port in ports.items()
    }


def iam_enforced(environ: Mapping[str, str]) -> bool:
    """LANDFALL_LOCAL_IAM: on (the default) or off; anything else is refused, naming both."""
    value = environ.get(LOCAL_IAM_ENV, "").strip().lower() or "on"
    if value not in ("on", "off"):
        raise StackError(
            f"{LOCAL_IAM_ENV}={environ[LOCAL_IAM_ENV]!r}: expected on (every Cloud Storage call checked against the "
            "deploy's IAM policy, the default) or off (recorded, never refused)"
        )
    return value == "on"


def job_regions(environ: Mapping[str, str], topology: Topology) -> tuple[str, ...]:
    """The regions the stack's jobs may run in: the default region and LANDFALL_JOB_REGIONS (`r1,r2`), as a
    deployment's --job-region; each gets an artifacts bucket."""
    extra = (r.strip() for r in environ.get(JOB_REGIONS_ENV, "").split(",") if r.strip())
    return tuple(dict.fromkeys((topology.default_region, *extra)))


def stack_env(topology: Topology, ports: dict[str, int], regions: tuple[str, ...] = ()) -> dict[str, str]:
    """The variables every client (functions, trainer, CLI, gcloud) uses to reach the local stack."""
    # Every client reaches Cloud Storage through the gate, which checks each call against the deploy's IAM policy;
    # this endpoint is the project owner's (a function's or a job's names its own identity: deploy/topology.py
    # storage_as).
    storage = f"http://{services.HOST}:{ports['storage_front']}"
    project, region = topology.project_id, topology.default_region
    return {
        "GOOGLE_CLOUD_PROJECT": topology.project_id,
        "PUBSUB_EMULATOR_HOST": f"{services.HOST}:{ports['pubsub']}",
        PUBSUB_GATE_ENV: f"{services.HOST}:{ports['pubsub_front']}",
        "FIRESTORE_EMULATOR_HOST": f"{services.HOST}:{ports['firestore']}",
        "STORAGE_EMULATOR_HOST": storage,
        "LANDFALL_VERTEX_ENDPOINT": f"{services.HOST}:{ports['vertex']}",
        "LANDFALL_LANDING_BUCKET": topology.bucket,
        "LANDFALL_CODE_BUCKET": topology.code_bucket,
        # Laid out and run as a deployment is: artifacts in their own bucket per job region, jobs as the trainer
        # account, a team's as the team's own.
        "LANDFALL_ARTIFACT_BUCKETS": ",".join(f"{r}={artifacts_bucket(project, r)}" for r in regions or (region,)),
        "LANDFALL_OUTPUT_BUCKET": artifacts_bucket(project, region),
        "LANDFALL_TRAINING_SERVICE_ACCOUNT": account_email(TRAINER_ACCOUNT, project),
        "LANDFALL_TEAM_SERVICE_ACCOUNT": f"{{team}}@{project}.iam.gserviceaccount.com",
        # So that `gcloud storage cp [-r] ... gs://...` reaches fake-gcs-server (through the front that serves what
        # gcloud asks and fake-gcs-server does not) and `gcloud pubsub ...` (publish, pull the dead letters) the
        # Pub/Sub emulator, without credentials.
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE": f"http://{services.HOST}:{ports['storage_front']}/storage/v1/",
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
        raise StackError(
            f"{SWEEP_EVERY_ENV} must be a whole number of seconds >= 1, got {raw!r}; unset it to use "
            "every_seconds from deploy/topology.toml [schedules.*]"
        )
    return int(raw)


def read_state(state_dir: Path) -> list[RunningService]:
    current = record.read(state_dir)
    return list(current.services) if current else []


def _service_env(environ: Mapping[str, str], stack_vars: Mapping[str, str]) -> dict[str, str]:
    """The LANDFALL_* settings in environ that the services should keep getting (not the stack's own variables)."""
    return {
        k: v
        for k, v in environ.items()
        if k.startswith("LANDFALL_")
        and k not in stack_vars
        and k not in (provision.STATE_DIR_ENV, PORTS_ENV, JOB_REGIONS_ENV)
    }


@dataclass(frozen=True)
class _Plan:
    """Everything needed to build any service's spec: the same at `up` and at every later restart."""

    topology: Topology
    state_dir: Path
    current: StackRecord

    def spec(self, name: str, extra_env: Mapping[str, str] | None = None) -> ServiceSpec:
        topology, ports, state_dir = self.topology, self.current.ports, self.state_dir
        project = topology.project_id
        env = {**self.current.env, **self.current.service_env, "PYTHONUNBUFFERED": "1", **(extra_env or {})}
        if name == "pubsub":
            return services.pubsub(ports[name])
        if name == "firestore":
            return services.firestore(ports[name], persistence.latest_firestore_snapshot(state_dir))
        if name == "storage":
            root = persistence.storage_dir(state_dir)
            root.mkdir(parents=True, exist_ok=True)
            return services.storage(
                ports[name],
                project=project,
                notification_topic=topology.notification_topic,
                bucket=topology.bucket,
                pubsub_host=self.current.env["PUBSUB_EMULATOR_HOST"],
                root=root,
            )
        if name in ("storage_front", "pubsub_front"):
            # the two gates hold one policy: the deploy's, for the stack's buckets and teams
            policy: services.GatePolicy = {
                "landing": self.current.env["LANDFALL_LANDING_BUCKET"],
                "code": self.current.env["LANDFALL_CODE_BUCKET"],
                "artifacts": self.current.env["LANDFALL_ARTIFACT_BUCKETS"],
                "teams_file": self.current.service_env.get("LANDFALL_TEAMS_FILE", ""),
                "record": state_dir / IAM_RECORD,
                "readable": self.current.service_env.get("LANDFALL_ALLOWED_BUCKETS", ""),
                "enforce": iam_enforced(self.current.service_env),
            }
            if name == "pubsub_front":
                return services.pubsub_front(ports[name], upstream=self.current.env["PUBSUB_EMULATOR_HOST"], **policy)
            return services.storage_front(ports[name], upstream=f"http://{services.HOST}:{ports['storage']}", **policy)
        if name == "vertex":
            images = self.current.service_env.get(VERTEX_IMAGES_ENV)
            faults = self.current.service_env.get(VERTEX_FAULTS_ENV)
            return services.vertex(
                ports[name],
                project=project,
                events_topic=topology.job_events_topic,
                state_dir=persistence.vertex_dir(state_dir),
                env=env,
                images_file=Path(images) if images else None,
                faults_file=Path(faults) if faults else None,
                iam=self.current.env["STORAGE_EMULATOR_HOST"],  # the gate holds the policy
            )
        if name == "bridge":
            endpoints = {f.name: f"http://{services.HOST}:{ports[f.name]}/" for f in topology.functions}
            return services.bridge(project=project, endpoints=endpoints, env=env)
        if name == "scheduler":
            return services.scheduler(project=project, every_seconds=self.current.every_seconds, env=env)
        topology.function(name)  # raises TopologyError naming the known functions
        member = f"serviceAccount:{account_email(function_account(name), project)}"
        # The function's calls carry its account, as its credentials do in a project: the storage gate and the
        # Vertex emulator hold them to that account's grants.
        acting = {
            "STORAGE_EMULATOR_HOST": storage_as(env["STORAGE_EMULATOR_HOST"], member),
            "LANDFALL_VERTEX_ENDPOINT": storage_as(env["LANDFALL_VERTEX_ENDPOINT"], member),
            # its publishes name it too (functions/gcp/clients.py publisher_client), through the Pub/Sub gate
            "PUBSUB_EMULATOR_HOST": env[PUBSUB_GATE_ENV],
        }
        return services.function(name, ports[name], {**env, **acting})

    def after_start(self, name: str) -> None:
        """What a service needs once it answers: Pub/Sub its topics and subscriptions, storage its bucket."""
        project = self.topology.project_id
        with _client_env(self.current.env):
            if name == "pubsub":
                provision.create_topics(self.topology, project)
                provision.create_subscriptions(self.topology, project)
            elif name == "storage_front":
                provision.create_bucket(self.topology.bucket, project)
                provision.create_bucket(self.topology.code_bucket, project)
                for pair in self.current.env["LANDFALL_ARTIFACT_BUCKETS"].split(","):
                    provision.create_bucket(pair.partition("=")[2], project)


@contextmanager
def _client_env(env: Mapping[str, str]) -> Iterator[None]:
    """Point this process's client libraries at the stack while provisioning."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def up(
    state_dir: Path | None = None, port_overrides: dict[str, int] | None = None, *, ports: str | None = None
) -> StackInfo:
    """Start every service, provision topics/subscriptions/bucket, write <state dir>/env. On a running stack, start
    again (on their ports, logs appended) the services that are down; a stack that is wholly up is left as it is.

    ports: "free", "default" or None (LANDFALL_PORTS, else the last stack's ports: base_ports); port_overrides win."""
    state_dir = state_dir or provision.default_state_dir()
    mode = ports_mode(os.environ, ports)
    with record.locked(state_dir):
        current = record.read(state_dir)
        if current is None:
            current = _start(state_dir, port_overrides, mode)
            restarted: tuple[str, ...] = ()
        else:
            down_now = [s.name for s in current.services if not processes.is_alive(s.pid)]
            if down_now:
                _check_restartable(current, state_dir)
            for name in down_now:
                current = current.replacing(_restart(current, name, state_dir))
                record.write(state_dir, current)
            restarted = tuple(down_now)
    (state_dir / "env").write_text("".join(f"export {k}={v}\n" for k, v in current.env.items()))
    return StackInfo(state_dir, current.env, current.services, restarted)


def _start(state_dir: Path, port_overrides: dict[str, int] | None, mode: str | None = None) -> StackRecord:
    topology = load_topology()
    wanted = {**base_ports(topology, state_dir, mode), **(port_overrides or {})}
    last = remembered_ports(state_dir) if mode is None else None
    last_ports, last_free = last if last is not None else ({}, frozenset())
    # picked free: now (0), or by the last stack and kept (so that the next `up` may pick again if it is taken)
    picked_free = frozenset(
        name for name, port in wanted.items() if port == 0 or (name in last_free and port == last_ports.get(name))
    )
    ports = resolve_ports(topology, wanted)
    iam_enforced(os.environ)  # a wrong value is refused before anything starts
    env = stack_env(topology, ports, job_regions(os.environ, topology))
    (state_dir / IAM_RECORD).unlink(missing_ok=True)  # what this stack's identities use, from its start
    current = StackRecord(
        services=(),
        env=env,
        ports=ports,
        service_env=_service_env(os.environ, env),
        every_seconds=every_seconds_override(os.environ),
    )
    plan = _Plan(topology, state_dir, current)
    logs = state_dir / "logs"
    running: list[RunningService] = []
    warming: list[threading.Thread] = []
    try:
        for stage in STAGES:
            running += processes.start_all([plan.spec(name) for name in stage], logs)
            current = StackRecord(tuple(running), env, ports, current.service_env, current.every_seconds)
            record.write(state_dir, current)
            for name in stage:
                plan.after_start(name)
                if name == "firestore":
                    warming.append(_beside(provision.warm_firestore, env["FIRESTORE_EMULATOR_HOST"], topology))
        for thread in warming:
            thread.join(WARM_WAIT_S)
    except BaseException:
        processes.stop_all(running)
        record.remove(state_dir)
        raise
    remember_ports(state_dir, ports, picked_free & set(ports))
    return current


WARM_WAIT_S = 30.0
"""How long `up` waits at its end for a warm-up it started (what is left of one it stops waiting for is harmless)."""


def _beside(warm: Callable[[str, str, str], None], host: str, topology: Topology) -> threading.Thread:
    """Run an emulator's warm-up (provision.warm_*) on a thread while the next services start. A warm-up that fails
    costs only what it would have saved: the first request pays the emulator's start, as without it."""

    def run() -> None:
        with contextlib.suppress(Exception):
            warm(host, topology.project_id, topology.runs_collection)

    thread = threading.Thread(target=run, name=f"landfall-{warm.__name__}", daemon=True)
    thread.start()
    return thread


def restart(name: str, state_dir: Path | None = None, extra_env: Mapping[str, str] | None = None) -> RunningService:
    """Stop one service (if it runs) and start it again on its port with the environment `up` gave it (plus
    extra_env), appending to its log. Firestore is snapshotted first and imports the snapshot; Pub/Sub gets its
    topics and subscriptions again (the messages it held are lost: Google's emulator keeps them in memory)."""
    state_dir = state_dir or provision.default_state_dir()
    with record.locked(state_dir):
        current = record.read(state_dir)
        if current is None:
            raise StackError(f"no local stack is recorded in {state_dir}; `landfall up` starts one")
        if current.service(name) is None:
            raise StackError(f"unknown service {name!r}; the stack's services: {', '.join(SERVICE_ORDER)}")
        _check_restartable(current, state_dir)
        new = _restart(current, name, state_dir, extra_env)
        record.write(state_dir, current.replacing(new))
        return new


def _check_restartable(current: StackRecord, state_dir: Path) -> None:
    names, ported = [s.name for s in current.services], set(SERVICE_ORDER) - PORTLESS_SERVICES
    storage = current.env.get("STORAGE_EMULATOR_HOST", "")
    gated = storage.endswith(f":{current.ports.get('storage_front')}") and "LANDFALL_ARTIFACT_BUCKETS" in current.env
    if names != list(SERVICE_ORDER) or set(current.ports) != ported or not gated:
        raise StackError(
            f"the stack in {state_dir} was started by another version of landfall and cannot be "
            "restarted service by service; run `landfall down` then `landfall up`"
        )


def _restart(
    current: StackRecord, name: str, state_dir: Path, extra_env: Mapping[str, str] | None = None
) -> RunningService:
    old = current.service(name)
    if old is None:
        raise StackError(f"unknown service {name!r}; the stack's services: {', '.join(SERVICE_ORDER)}")
    if name == "firestore" and processes.is_alive(old.pid):
        persistence.save_firestore(current.env["FIRESTORE_EMULATOR_HOST"], load_topology().project_id, state_dir)
    processes.stop(old)
    plan = _Plan(load_topology(), state_dir, current)
    with old.log_path.open("a") as log:
        log.write(f"=== landfall restart {name} at {datetime.now(UTC).isoformat(timespec='seconds')} ===\n")
    new = processes.start(plan.spec(name, extra_env), old.log_path.parent, append=True)
    try:
        plan.after_start(name)
    except BaseException:
        processes.stop(new)
        raise
    return new


def down(state_dir: Path | None = None, *, wipe: bool = False) -> list[str]:
    """Stop exactly the processes `up` started (by their recorded process groups), a stage at a time in reverse,
    snapshotting Firestore once nothing writes to it; returns their names. With wipe, also delete what the stack
    keeps (Firestore documents, bucket objects, Vertex jobs) instead of snapshotting it."""
    state_dir = state_dir or provision.default_state_dir()
    problems: list[str] = []
    with record.locked(state_dir):
        current = record.read(state_dir)
        running = list(current.services) if current else []
        stage_of = {name: i for i, stage in enumerate(STAGES) for name in stage}
        for i in reversed(range(len(STAGES) + 1)):  # index len(STAGES): services no stage names, stopped first
            group = [s for s in running if stage_of.get(s.name, len(STAGES)) == i]
            firestore = next((s for s in group if s.name == "firestore"), None)
            if current and firestore and not wipe and processes.is_alive(firestore.pid):
                try:
                    persistence.save_firestore(
                        current.env["FIRESTORE_EMULATOR_HOST"], load_topology().project_id, state_dir
                    )
                except StackError as exc:
                    problems.append(str(exc))
            processes.stop_all(group)
        record.remove(state_dir)
        (state_dir / "env").unlink(missing_ok=True)
        if wipe:
            persistence.wipe(state_dir)
    if problems:
        raise StackError(f"stopped {', '.join(s.name for s in running)}, but: " + "; ".join(problems))
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
