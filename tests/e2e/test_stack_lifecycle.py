"""The local stack under restarts, through the `landfall` command as a user or the fault campaign runs it: a function
restarted while datasets are in flight, a killed function brought back after failed deliveries, and `down`/`up`
at once on the same ports, keeping runs, dataset records and bucket objects until `down --wipe`.

The module runs its own stack (it stops and restarts it), on ports picked once and kept for every `up`, with a
short submission lease so that a delivery killed mid-submission is taken over within seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deploy.local import processes, record, stack
from deploy.local.bridge import retry_delay
from deploy.topology import load_topology
from schemas.dataset_record import dataset_id_for
from schemas.run_record import TERMINAL_STATES, RunState
from schemas.training_request import parse_training_request, run_id_for
from tests.e2e.conftest import ROUTES_FILE
from tests.polling import wait_for

pytestmark = pytest.mark.e2e
EXAMPLES = Path(__file__).resolve().parents[2] / "schemas" / "examples"
SHARD = "x0,x1,label\n" + "".join(f"{i % 7 / 7:.3f},{i % 5 / 5:.3f},{int(i % 7 > 3)}\n" for i in range(120))


@dataclass(frozen=True)
class OwnStack:
    state_dir: Path
    ports: dict[str, int]
    env: dict[str, str]
    """The environment `landfall` commands run with: the stack's variables and the test settings."""

    @property
    def project(self) -> str:
        return self.env["GOOGLE_CLOUD_PROJECT"]

    def landfall(self, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "landfall.cli", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )

    def port_flags(self) -> list[str]:
        return [f"--port={name}={port}" for name, port in self.ports.items()]

    def log(self, name: str) -> str:
        return (self.state_dir / "logs" / f"{name}.log").read_text(errors="replace")

    def firestore(self) -> Any:
        from google.cloud import firestore

        return firestore.Client(project=self.project)

    def bucket(self) -> Any:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(project=self.project, credentials=AnonymousCredentials()).bucket(
            self.env["LANDFALL_LANDING_BUCKET"]
        )

    def jobs_of(self, run: dict[str, Any]) -> list[Any]:
        import grpc
        from google.cloud import aiplatform_v1
        from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport

        from functions.gcp.vertex import RUN_LABEL

        channel = grpc.insecure_channel(self.env["LANDFALL_VERTEX_ENDPOINT"])
        client = aiplatform_v1.JobServiceClient(transport=JobServiceGrpcTransport(channel=channel))
        parent = run["vertex"]["job_name"].rsplit("/customJobs", 1)[0]
        return list(
            client.list_custom_jobs(request={"parent": parent, "filter": f'labels.{RUN_LABEL}="{run["run_id"]}"'})
        )


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnStack]:
    state_dir = tmp_path_factory.mktemp("lifecycle")
    ports = {name: processes.free_port() for name in stack.SERVICE_ORDER if name not in stack.PORTLESS_SERVICES}
    settings = {
        "LANDFALL_ROUTES_FILE": str(ROUTES_FILE),
        "LANDFALL_SUBMISSION_LEASE_SECONDS": "10",
        "LANDFALL_STATE_DIR": str(state_dir),
        # The scheduler ticks the sweep and the reconciler every second, not every minute: a REJECTED run is
        # announced (settled) within seconds, and the tests wait for that rather than for the next minute's tick.
        "LANDFALL_SWEEP_EVERY_SECONDS": "1",
    }
    saved = dict(os.environ)
    os.environ.update(settings)
    try:
        info = stack.up(state_dir, ports)
        os.environ.update(info.env)  # for this process's clients
        yield OwnStack(state_dir, ports, {**saved, **settings, **info.env})
    finally:
        try:
            stack.down(state_dir, wipe=True)
        finally:
            os.environ.clear()
            os.environ.update(saved)


def upload(own: OwnStack, prefix: str, shards: int = 2) -> str:
    """Shards then the _SUCCESS marker; returns the run id the marker's generation names."""
    bucket = own.bucket()
    for i in range(shards):
        bucket.blob(f"{prefix}part-{i:05d}.csv").upload_from_string(SHARD, content_type="text/csv")
    marker = bucket.blob(f"{prefix}_SUCCESS")
    marker.upload_from_string(b"")
    return run_id_for(f"gcs:{bucket.name}/{prefix}:{marker.generation}")


def terminal(own: OwnStack, run_id: str, timeout_s: float) -> dict[str, Any]:
    runs = own.firestore().collection("runs")

    def done() -> dict[str, Any] | None:
        snap = runs.document(run_id).get()
        doc = snap.to_dict() if snap.exists else None
        return doc if doc and RunState(doc["state"]) in TERMINAL_STATES else None

    return wait_for(done, timeout_s, f"run {run_id} to end", step=0.5)


def settled(own: OwnStack, run_id: str, timeout_s: float) -> dict[str, Any]:
    """The run once it has ended and its RunFinished is out (the last write a run gets: the reconciler announces a
    REJECTED run on its next tick, within seconds here), so a snapshot taken now is the one that must survive."""
    runs = own.firestore().collection("runs")

    def done() -> dict[str, Any] | None:
        doc = terminal(own, run_id, timeout_s)
        return doc if doc["submission"].get("results_published") is True else None

    return (
        wait_for(done, timeout_s, f"run {run_id} to be announced", step=0.5) and runs.document(run_id).get().to_dict()
    )


def test_restarting_dispatch_while_datasets_are_in_flight_leaves_one_run_and_one_job_each(own_stack: OwnStack) -> None:
    from google.cloud.firestore_v1.base_query import FieldFilter

    tag = uuid.uuid4().hex[:6]
    prefixes = [f"datasets/inflight-{tag}-{i}/" for i in range(4)]
    with ThreadPoolExecutor(len(prefixes)) as pool:
        run_ids = list(pool.map(lambda prefix: upload(own_stack, prefix), prefixes))
    runs = own_stack.firestore().collection("runs")
    wait_for(lambda: any(runs.document(r).get().exists for r in run_ids), 60, "the dispatcher to take a request")
    states = [(runs.document(r).get().to_dict() or {}).get("state") for r in run_ids]
    assert any(state is None or RunState(state) not in TERMINAL_STATES for state in states), states
    port = own_stack.ports["dispatch"]
    restarted = own_stack.landfall("restart", "dispatch")
    assert restarted.returncode == 0, restarted.stderr
    assert f"restarted dispatch on 127.0.0.1:{port}" in restarted.stdout

    for prefix, run_id in zip(prefixes, run_ids, strict=True):
        doc = terminal(own_stack, run_id, 240)
        assert doc["state"] == "SUCCEEDED", doc.get("error")
        uri = f"gs://{own_stack.env['LANDFALL_LANDING_BUCKET']}/{prefix}"
        same_dataset = [d.id for d in runs.where(filter=FieldFilter("request.dataset.uri", "==", uri)).stream()]
        assert same_dataset == [run_id]
        assert len(own_stack.jobs_of(doc)) == 1
    log = own_stack.log("dispatch")
    assert log.count("=== landfall restart dispatch") == 1  # one log, appended to


def test_a_killed_dispatcher_brought_back_after_four_failed_deliveries_processes_the_request(
    own_stack: OwnStack,
) -> None:
    from google.cloud import pubsub_v1

    dispatch = record.read(own_stack.state_dir).service("dispatch")  # type: ignore[union-attr]
    assert dispatch is not None, "the stack's record names no dispatch service"
    os.killpg(dispatch.pid, signal.SIGKILL)  # a crash: no graceful stop
    wait_for(lambda: not processes.group_alive(dispatch.pid), 10, "the dispatcher to die")
    status = own_stack.landfall("status")
    assert status.returncode == 1 and "DOWN" in status.stdout

    request = json.loads((EXAMPLES / "training_request.json").read_text())
    request["idempotency_key"] = f"e2e-killed-dispatcher-{uuid.uuid4().hex[:8]}"
    request["constraints"]["budget_usd"] = 0.000001  # rejected by the planner: no job, no training
    topic = f"projects/{own_stack.project}/topics/{load_topology().requests_topic}"
    published_at = time.monotonic()
    message_id = pubsub_v1.PublisherClient().publish(topic, json.dumps(request).encode()).result(timeout=30)

    route = load_topology().function("dispatch")
    fourth = f"dispatch: message {message_id} attempt 4 of {route.dead_letter.max_delivery_attempts} failed"
    wait_for(lambda: fourth in own_stack.log("bridge"), 30, "four failed deliveries to the dead dispatcher")
    restarted = own_stack.landfall("restart", "dispatch")
    assert restarted.returncode == 0, restarted.stderr
    back_at = time.monotonic()
    # Deliveries that failed while the dispatcher was down: four, or more where its restart outlasted a back-off
    # (a process's start is slow on a loaded machine); none may fail once it is back.
    failure = f"dispatch: message {message_id} attempt "
    of = f" of {route.dead_letter.max_delivery_attempts} failed"

    def failures() -> int:
        return sum(1 for line in own_stack.log("bridge").splitlines() if failure in line and of in line)

    failed = failures()
    doc = terminal(own_stack, parse_training_request(request).run_id, 60)
    assert doc["state"] == "REJECTED"
    took = time.monotonic() - back_at
    pending = retry_delay(route.retry, failed)  # the back-off after the last failed delivery
    assert took < pending + 15, f"processed {took:.0f}s after the dispatcher was back; the back-off was {pending}s"
    assert failures() == failed >= 4, "a delivery failed after the dispatcher was back"
    assert published_at < back_at


def _kept(
    own: OwnStack, run_id: str, prefix: str
) -> tuple[dict[str, Any] | None, dict[str, Any] | None, dict[str, int]]:
    """The run record, the dataset record and the bucket's objects under prefix (name -> generation)."""
    db = own.firestore()
    run = db.collection("runs").document(run_id).get()
    bucket = own.bucket()
    dataset = db.collection("datasets").document(dataset_id_for(bucket.name, prefix)).get()
    objects = {blob.name: int(blob.generation) for blob in bucket.client.list_blobs(bucket.name, prefix=prefix)}
    return (run.to_dict() if run.exists else None, dataset.to_dict() if dataset.exists else None, objects)


def test_down_then_up_at_once_twice_keeps_runs_datasets_and_objects_and_down_wipe_drops_them(
    own_stack: OwnStack,
) -> None:
    prefix = f"ingest-only/kept-{uuid.uuid4().hex[:6]}/"
    run_id = upload(own_stack, prefix)
    assert settled(own_stack, run_id, 150)["state"] == "REJECTED"  # the route's budget is below any plan
    before = _kept(own_stack, run_id, prefix)
    assert before[0] and before[1] and len(before[2]) == 3

    for cycle in (1, 2):
        down = own_stack.landfall("down")
        assert down.returncode == 0, down.stderr
        up = own_stack.landfall("up", *own_stack.port_flags())  # at once, on the same ports (up has its own deadline)
        assert up.returncode == 0, f"cycle {cycle}: {up.stderr}"
        assert _kept(own_stack, run_id, prefix) == before, f"cycle {cycle}: data lost across down/up"

    wiped = own_stack.landfall("down", "--wipe")
    assert wiped.returncode == 0 and "wiped" in wiped.stdout, wiped.stderr
    up = own_stack.landfall("up", *own_stack.port_flags())
    assert up.returncode == 0, up.stderr
    assert _kept(own_stack, run_id, prefix) == (None, None, {})
    assert own_stack.bucket().exists()  # provisioned again, empty


DEFAULT_PORTS_ENV = "LANDFALL_TEST_DEFAULT_PORTS"


@pytest.mark.alone  # `make test` runs it after the parallel pass, with no other stack up
@pytest.mark.skipif(
    os.environ.get(DEFAULT_PORTS_ENV) != "1",
    reason=f"uses the default ports, which a developer's own stack may hold: set {DEFAULT_PORTS_ENV}=1 "
    "(the test above does the same on ports it picks)",
)
def test_down_then_up_at_once_twice_on_the_default_ports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = load_topology().local_ports
    busy = [f"{name}={port}" for name, port in defaults.items() if not processes.port_is_free(port)]
    if busy:
        pytest.skip(f"default ports in use: {', '.join(busy)}")
    env = {**os.environ, "LANDFALL_STATE_DIR": str(tmp_path)}

    def landfall(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "landfall.cli", *args], env=env, capture_output=True, text=True, timeout=120
        )

    def open_clients() -> list[Any]:
        """Clients of this process that keep connections open across `down`, as a user's shell or `make demo` do:
        the servers close them first, so their side lingers in TIME-WAIT on the default ports."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import firestore, storage

        monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", f"127.0.0.1:{defaults['firestore']}")
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{defaults['storage']}")
        db = firestore.Client(project=load_topology().project_id)
        db.collection("runs").document("probe").get()
        gcs = storage.Client(project=load_topology().project_id, credentials=AnonymousCredentials())
        list(gcs.list_buckets())
        return [db, gcs]

    try:
        assert landfall("up").returncode == 0
        for cycle in (1, 2):
            clients = open_clients()
            assert landfall("down").returncode == 0
            up = landfall("up")
            assert up.returncode == 0, f"cycle {cycle}: {up.stderr}"
            del clients
    finally:
        landfall("down", "--wipe")


def test_restarting_each_backend_keeps_its_data_and_the_chain_delivering(own_stack: OwnStack) -> None:
    prefix = f"ingest-only/restarts-{uuid.uuid4().hex[:6]}/"
    run_id = upload(own_stack, prefix)
    assert settled(own_stack, run_id, 150)["state"] == "REJECTED"
    before = _kept(own_stack, run_id, prefix)

    def restart(service: str) -> None:
        restarted = own_stack.landfall("restart", service)
        assert restarted.returncode == 0, f"{service}: {restarted.stderr}"
        assert own_stack.log(service).count(f"=== landfall restart {service}") == 1

    for service in ("firestore", "storage", "pubsub"):
        restart(service)
    assert _kept(own_stack, run_id, prefix) == before
    # Pub/Sub came back with its topics and subscriptions, and the bridge, not restarted, pulls again: a new
    # dataset goes the whole way.
    again = upload(own_stack, f"ingest-only/after-restarts-{uuid.uuid4().hex[:6]}/")
    assert terminal(own_stack, again, 60)["state"] == "REJECTED"
    assert "pulling from projects/" in own_stack.log("bridge")
    for service in ("bridge", "vertex"):
        restart(service)
    assert own_stack.landfall("status").returncode == 0
    assert _kept(own_stack, run_id, prefix) == before
