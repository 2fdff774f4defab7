"""A local stack of the benchmark's own (a temporary state folder, free ports: it collides with no other stack) whose
trainer image the Vertex emulator maps to the no-op trainer, plus the clients that drop datasets and read records."""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from deploy.images import trainer_image_uri
from deploy.local import stack
from deploy.topology import Topology, load_topology
from schemas.run_record import RunRecord, parse_run_record
from schemas.times import parse_timestamp

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1 import JobServiceClient

NOOP_ENTRYPOINT = ("python", "-m", "bench.local_stack.noop_trainer")
"""What the Vertex emulator runs for the trainer image (`python` is the emulator's own interpreter)."""
SHARD = "f0,f1,label\n0.1,0.2,0\n0.9,0.8,1\n"
"""One tiny CSV shard: the default route (datasets/, marker) accepts it; the no-op never reads it."""


def trainer_image(topology: Topology) -> str:
    """The image the dispatcher names in container_spec, resolved as functions/settings.py resolves it."""
    return os.environ.get("LANDFALL_TRAINER_IMAGE") or trainer_image_uri(
        topology.project_id, os.environ.get("LANDFALL_DEFAULT_REGION", topology.default_region)
    )


@dataclass(frozen=True)
class Stack:
    """A running benchmark stack: its record and the clients this process uses against it."""

    info: stack.StackInfo
    topology: Topology
    storage: Any
    firestore: Any
    cache: dict[str, Any] = field(default_factory=dict)
    """Clients made on first use (the Vertex JobService client)."""

    def pid(self, service: str) -> int:
        return next(s.pid for s in self.info.services if s.name == service)

    def drop(self, prefix: str, shards: int = 1) -> datetime:
        """Upload shards then `_SUCCESS` under prefix in the landing bucket; returns the marker's finalize time
        (the object's timeCreated, as fake-gcs-server stamped it)."""
        bucket = self.storage.bucket(self.topology.bucket)
        for i in range(shards):
            bucket.blob(f"{prefix}part-{i:05d}.csv").upload_from_string(SHARD, content_type="text/csv")
        marker = bucket.blob(f"{prefix}_SUCCESS")
        marker.upload_from_string(b"")
        created: datetime | None = marker.time_created  # google-cloud-storage is unannotated
        if created is None:
            raise RuntimeError(f"storage returned no timeCreated for gs://{self.topology.bucket}/{prefix}_SUCCESS")
        return created

    def runs(self) -> list[RunRecord]:
        docs = self.firestore.collection(self.topology.runs_collection).stream()
        return [parse_run_record(d.to_dict()) for d in docs]

    def runs_of(self, dataset_uri: str) -> list[RunRecord]:
        """The runs of one dataset: one small query, so a bench that waits on a run does not load the stack it
        measures (streaming every run each 50 ms grew with the runs made and took CPU from the path measured)."""
        from google.cloud.firestore_v1.base_query import FieldFilter

        query = self.firestore.collection(self.topology.runs_collection).where(
            filter=FieldFilter("request.dataset.uri", "==", dataset_uri)
        )
        return [parse_run_record(d.to_dict()) for d in query.stream()]

    def version(self, run_id: str) -> dict[str, Any] | None:
        """The ingest version document of a run (the outbox's id is the run's), None when there is none."""
        snapshot = self.firestore.collection(self.topology.dataset_versions_collection).document(run_id).get()
        found: dict[str, Any] | None = snapshot.to_dict() if snapshot.exists else None
        return found

    def versions(self) -> list[dict[str, Any]]:
        return [d.to_dict() for d in self.firestore.collection(self.topology.dataset_versions_collection).stream()]

    def job_created(self, run: RunRecord) -> datetime | None:
        """The create_time of the run's Vertex job (GetCustomJob), None when it records none."""
        if run.vertex is None:
            return None
        job = self._job_client().get_custom_job(name=run.vertex.job_name)
        # proto-plus declares the field a protobuf Timestamp but reads it as a datetime (None when unset)
        return cast("datetime | None", job.create_time)

    def _job_client(self) -> JobServiceClient:
        import grpc
        from google.cloud import aiplatform_v1
        from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport

        if "job_client" not in self.cache:
            channel = grpc.insecure_channel(self.info.env["LANDFALL_VERTEX_ENDPOINT"])
            self.cache["job_client"] = aiplatform_v1.JobServiceClient(
                transport=JobServiceGrpcTransport(channel=channel)
            )
        client: JobServiceClient = self.cache["job_client"]
        return client

    def jobs(self, regions: set[str]) -> list[Any]:
        """Every Vertex custom job in regions (ListCustomJobs, all pages)."""
        found = []
        for region in sorted(regions):
            parent = f"projects/{self.topology.project_id}/locations/{region}"
            found += list(
                self._job_client().list_custom_jobs(request={"parent": parent, "filter": "labels.landfall-run-id:*"})
            )
        return found


START_TRIES = 3
"""Free ports are picked before the services bind them; another process on the machine may take one meanwhile."""


def _up_on_free_ports(state_dir: Path, topology: Topology) -> stack.StackInfo:
    from deploy.local.processes import StackError

    for attempt in range(1, START_TRIES + 1):
        try:
            return stack.up(state_dir, {name: 0 for name in topology.local_ports})
        except StackError as exc:
            if "in use" not in str(exc) or attempt == START_TRIES:
                raise
            print(
                f"a port was taken while the stack started ({exc}); starting again on other ports",
                file=sys.stderr,
                flush=True,
            )
    raise AssertionError("unreachable")


@contextmanager
def noop_stack(
    keep: Path | None = None, faults: Mapping[str, object] | None = None, env: Mapping[str, str] | None = None
) -> Iterator[Stack]:
    """Start the stack (every port free, state in a temporary folder or keep), yield it, stop it. faults: the Vertex
    emulator's fault plan from the start (its --faults); env: more environment for every service (routes, limits)."""
    topology = load_topology()
    with tempfile.TemporaryDirectory(prefix="landfall-bench-") as tmp:
        state_dir = keep or Path(tmp)
        state_dir.mkdir(parents=True, exist_ok=True)
        images = state_dir / "images.json"
        images.write_text(json.dumps({trainer_image(topology): list(NOOP_ENTRYPOINT)}))
        saved = dict(os.environ)
        os.environ[stack.VERTEX_IMAGES_ENV] = str(images)
        if faults:
            plan = state_dir / "faults.json"
            plan.write_text(json.dumps(faults))
            os.environ[stack.VERTEX_FAULTS_ENV] = str(plan)
        os.environ.update(env or {})
        started = time.monotonic()
        try:
            info = _up_on_free_ports(state_dir, topology)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        print(
            f"local stack up in {time.monotonic() - started:.1f} s (state {state_dir}, logs {state_dir}/logs)",
            file=sys.stderr,
            flush=True,
        )
        try:
            os.environ.update(info.env)
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import firestore, storage

            yield Stack(
                info,
                topology,
                storage.Client(project=topology.project_id, credentials=AnonymousCredentials()),
                firestore.Client(project=topology.project_id),
            )
        finally:
            stack.down(state_dir, wipe=True)
            os.environ.clear()
            os.environ.update(saved)


def seconds(later: str | datetime | None, earlier: str | datetime | None) -> float | None:
    """later - earlier in seconds (RFC 3339 text or datetimes); None when either is unknown."""
    if later is None or earlier is None:
        return None
    a = parse_timestamp(later, field="time") if isinstance(later, str) else later
    b = parse_timestamp(earlier, field="time") if isinstance(earlier, str) else earlier
    return (a - b).total_seconds()


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank; values must not be empty."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered), math.ceil(q / 100 * len(ordered))) - 1)]


def session_cpu_seconds(session: int) -> float:
    """User + system CPU seconds of every live process in a session (a stack service leads its own session, so a
    functions-framework server counts with its gunicorn worker). Linux /proc only."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # the process ended while we looked
            continue
        if int(fields[3]) == session:  # fields after the name: state ppid pgrp session ... utime(11) stime(12)
            total += int(fields[11]) + int(fields[12])
    return total / tick


PYTHON_THREAD = "python"
"""The name (/proc comm) of the interpreter's threads: gunicorn's arbiter and worker, and every thread Python starts.
gRPC core names its own (grpc_global_timer, event_engine, lifeguard)."""


def session_run_seconds(session: int) -> dict[str, float]:
    """Seconds on a CPU of the live threads in a session, by thread name, from the scheduler's nanosecond counts
    (/proc/PID/task/TID/schedstat): /proc's user + system time is kept in 10 ms ticks, too coarse for an idle
    server's fraction of a millisecond a second over a short window."""
    totals: dict[str, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rpartition(")")[2].split()[3]) != session:
                continue
            for task in stat.parent.glob("task/*"):
                name = (task / "comm").read_text().strip()
                totals[name] = totals.get(name, 0.0) + int((task / "schedstat").read_text().split()[0]) / 1e9
        except OSError:  # the process or thread ended while we looked
            continue
    return totals


def idle_cpu_ms_per_s(session: int, seconds: float) -> dict[str, float]:
    """CPU milliseconds a second of a session's threads, by name, over `seconds` with nothing sent to them."""
    before, start = session_run_seconds(session), time.monotonic()
    time.sleep(seconds)  # the window measured, not a wait for something to happen
    after, elapsed = session_run_seconds(session), time.monotonic() - start
    return {name: 1000 * (after[name] - before.get(name, 0.0)) / elapsed for name in after}
