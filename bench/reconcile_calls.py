"""Reconciler benchmark: Vertex AI calls per reconcile pass, by method, for 10, 100 and 1,000 open
runs, counted by the Vertex emulator itself.

    .venv/bin/python bench/reconcile_calls.py [--runs 10,100,1000] [--history 1000]

For each count it starts a Vertex emulator (its JobService in this process, served over gRPC) and uses one Firestore
emulator. Jobs are seeded straight into the emulator's job table rather than made with CreateCustomJob (1,000 jobs
would be 1,000 replica processes on this machine): N RUNNING jobs labelled with their runs, last changed two hours
ago, plus --history ended jobs of earlier runs (created days ago). Firestore holds the N open runs (RUNNING, naming
their jobs) and the ended runs of the history. Three passes each, through the real adapters (VertexJobs over gRPC,
the Firestore stores), with the orphan look on:

- old: the reconciler without watermarks (ReconcilerDeps.changes None): a GetCustomJob per open run, and
  ListCustomJobs over every labelled job ever made (history included);
- first: with watermarks, but none stored yet: the safe full pass (a GetCustomJob per open run, every labelled
  job listed for orphans), which stores the watermark in Firestore;
- steady: the next pass: one ListCustomJobs per region for the jobs changed since (none) or created within the orphan
  window (none), no job read.

Target: the steady pass makes the same number of Vertex calls for every count (it does not grow with open runs).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deploy.local import processes, services
from functions.gcp.orphans_store import OrphansStore
from functions.gcp.runs_store import RunsStore
from functions.gcp.vertex import RUN_LABEL, VertexJobs
from functions.gcp.watermarks_store import WatermarksStore
from functions.listener.handler import ListenerDeps
from functions.reconciler.changes import ChangeDeps
from functions.reconciler.handler import OPEN_STATES, ReconcilerDeps, _reconcile
from functions.reconciler.orphans import OrphanDeps
from functions.records.attempts import AttemptPolicy
from schemas.run_record import RunState, VertexJobRef, new_run

PROJECT = "landfall-local"
REGION = "us-central1"
METHODS = ("GetCustomJob", "ListCustomJobs")


def _vertex(folder: Path) -> tuple[Any, Any, Any]:
    """An in-process Vertex emulator: (its JobService, the gRPC server, a JobServiceClient on it)."""
    import grpc
    from google.cloud import aiplatform_v1
    from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport

    from deploy.vertex_emulator.faults import FaultPlan
    from deploy.vertex_emulator.runner import RunnerSettings
    from deploy.vertex_emulator.server import EmulatorConfig, JobService, build_server

    config = EmulatorConfig(
        project=PROJECT, state_dir=folder, events_topic=None, runner=RunnerSettings(cwd=folder), faults=FaultPlan()
    )
    service = JobService(config)
    server, port = build_server(service, "127.0.0.1", 0)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    return service, server, aiplatform_v1.JobServiceClient(transport=JobServiceGrpcTransport(channel=channel))


def _seed_job(service: Any, run_id: str, state: str, changed: datetime) -> str:
    from google.cloud.aiplatform_v1.types import CustomJob, JobState

    store = service._store  # seeded directly: the emulator's own table (see the module's docstring)
    name = f"projects/{PROJECT}/locations/{REGION}/customJobs/{store.new_id()}"
    job = CustomJob(
        name=name,
        display_name=f"landfall-{run_id}",
        labels={RUN_LABEL: run_id},
        state=JobState[state],
        create_time=changed - timedelta(minutes=5),
        start_time=changed,
        update_time=changed,
    )
    store.put(job)
    return name


def _seed(service: Any, client: Any, prefix: str, n: int, history: int) -> None:
    """n open runs with RUNNING jobs and `history` ended runs with their SUCCEEDED jobs."""
    now = datetime.now(UTC)
    batch, pending = client.batch(), 0
    rows = [(f"run-open-{i:05d}", RunState.RUNNING, now - timedelta(hours=2)) for i in range(n)]
    rows += [(f"run-old-{i:05d}", RunState.SUCCEEDED, now - timedelta(days=3)) for i in range(history)]
    for run_id, state, changed in rows:
        job_state = "JOB_STATE_RUNNING" if state == RunState.RUNNING else "JOB_STATE_SUCCEEDED"
        name = _seed_job(service, run_id, job_state, changed)
        ref = VertexJobRef(name, name.rsplit("/", 1)[-1], REGION, f"landfall-{run_id}", job_state)
        record = new_run(run_id, {"task": "t"}, now=changed)
        record = replace(record, state=state, vertex=ref)
        batch.set(client.collection(f"{prefix}runs").document(run_id), record.to_document())
        pending += 1
        if pending == 400:
            batch.commit()
            batch, pending = client.batch(), 0
    if pending:
        batch.commit()


def _deps(prefix: str, client: Any, vertex: VertexJobs, *, watermarks: bool) -> ReconcilerDeps:
    runs = RunsStore(client, f"{prefix}runs")

    def clock() -> datetime:
        return datetime.now(UTC)

    return ReconcilerDeps(
        open_runs=lambda: runs.in_states(OPEN_STATES),
        vertex=vertex,
        listener=ListenerDeps(store=runs, vertex=vertex, read_text=lambda uri: None, now=clock),
        resubmit=lambda run_id: "unused",
        policy=AttemptPolicy(),
        lease_seconds=120,
        now=clock,
        orphans=OrphanDeps(
            store=OrphansStore(client, f"{prefix}orphans"),
            runs=runs.get_many,
            regions=(REGION,),
            cancel=False,
            grace_seconds=120,
        ),
        changes=ChangeDeps(watermarks=WatermarksStore(client, f"{prefix}reconciler")) if watermarks else None,
    )


def _pass(service: Any, deps: ReconcilerDeps) -> tuple[Counter[str], str]:
    """One pass: the Vertex calls it made by method, and its summary with its wall time."""
    service.faults.replace({})  # counts start empty
    started = time.perf_counter()
    said = _reconcile(deps)
    took = time.perf_counter() - started
    counted: Counter[str] = Counter()
    for key, seen in service.faults.counts().items():
        counted[key.split(" ")[0]] += seen["calls"]
    return counted, f"{said} ({took:.1f} s)"


def measure(n: int, history: int, client: Any, work: Path) -> dict[str, Counter[str]]:
    service, server, jobs_client = _vertex(work / f"vertex-{n}")
    try:
        prefix = f"bench{n}-"
        _seed(service, client, prefix, n, history)
        vertex = VertexJobs(PROJECT, lambda region: jobs_client)
        old, said_old = _pass(service, _deps(prefix, client, vertex, watermarks=False))
        first, said_first = _pass(service, _deps(prefix, client, vertex, watermarks=True))
        steady, said_steady = _pass(service, _deps(prefix, client, vertex, watermarks=True))
        for label, said in (("old", said_old), ("first", said_first), ("steady", said_steady)):
            print(f"  {n:>5} open runs, {label:<6} pass: {said}", flush=True)
        return {"old": old, "first": first, "steady": steady}
    finally:
        server.stop(grace=0)
        service.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", default="10,100,1000", help="open-run counts, comma-separated (default 10,100,1000)")
    parser.add_argument("--history", type=int, default=1000, help="ended labelled jobs of earlier runs (default 1000)")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.runs.split(",") if c.strip()]
    from google.cloud import firestore

    with tempfile.TemporaryDirectory(prefix="landfall-reconcile-bench-") as tmp:
        work = Path(tmp)
        port = processes.free_port()
        store = processes.start(services.firestore(port), work)
        os.environ["FIRESTORE_EMULATOR_HOST"] = f"{services.HOST}:{port}"
        os.environ["GOOGLE_CLOUD_PROJECT"] = PROJECT
        try:
            client = firestore.Client(project=PROJECT)
            print(
                f"Vertex calls per reconcile pass, one region, {args.history} ended jobs of earlier runs:", flush=True
            )
            results = {n: measure(n, args.history, client, work) for n in counts}
        finally:
            processes.stop(store)
    columns = (("old", 8), ("first", 10), ("steady", 11))
    header = f"{'open runs':>9} | " + " | ".join(f"{name + ': Get':>{w}} {'List':>5}" for name, w in columns)
    print(header)
    print("-" * len(header))
    for n, r in results.items():
        cells = [
            f"{r[k]['GetCustomJob']:>{w}} {r[k]['ListCustomJobs']:>5}"
            for k, w in (("old", 8), ("first", 10), ("steady", 11))
        ]
        print(f"{n:>9} | " + " | ".join(cells))
    steady = {n: sum(r["steady"].values()) for n, r in results.items()}
    flat = len(set(steady.values())) == 1
    print(
        f"steady pass: {sorted(set(steady.values()))} call(s) for {', '.join(map(str, counts))} open runs: "
        + ("does not grow with the open runs (target met)" if flat else "GROWS with the open runs (target missed)")
    )
    return 0 if flat else 1


if __name__ == "__main__":
    sys.exit(main())
