"""The campaign's hands on its own local stack: `landfall up/restart/down` in its state folder, the clients that
drop data, publish messages and read Firestore and Vertex, and the replica processes of a run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from deploy.local import stack
from deploy.local.provision import STATE_DIR_ENV
from deploy.topology import load_topology
from schemas.dataset_record import dataset_id_for

REPO_ROOT = Path(__file__).resolve().parents[2]
CAMPAIGN_IMAGE = "us-docker.pkg.dev/landfall-campaign/campaign/checkpoint-trainer:1"
STACK_SETTINGS = {
    "LANDFALL_TRAINER_IMAGE": CAMPAIGN_IMAGE,
    "LANDFALL_CAMPAIGN_TRAIN_SECONDS": "3",
    "LANDFALL_SWEEP_EVERY_SECONDS": "2",
    "LANDFALL_SUBMISSION_LEASE_SECONDS": "6",
    "LANDFALL_INGEST_LEASE_SECONDS": "6",
    "LANDFALL_WAIT_BACKOFF_SECONDS": "3",
    "LANDFALL_RECONCILE_GRACE_SECONDS": "3",
    "LANDFALL_CANARY_FIRST_RUNS": "0",
}
"""What the campaign's stack runs with: its checkpointing trainer (3 s of training), a reconcile tick every 2 s,
leases and back-offs of seconds (so a crash is taken over within a trial, not after two minutes), and no first-run
canary (a trial's run is one job unless a fault makes more)."""


class CampaignStack:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.topology = load_topology()
        self.env: dict[str, str] = {}
        self._lock = threading.Lock()
        self.restarts = 0

    # -- landfall up / restart / down -------------------------------------------------------------------------
    def _landfall(self, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), STATE_DIR_ENV: str(self.state_dir), **(extra_env or {})}
        return subprocess.run(
            [sys.executable, "-m", "landfall.cli", *args],
            cwd=REPO_ROOT,
            env=env,
            text=True,
            capture_output=True,
            timeout=300,
        )

    def up(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if (self.state_dir / "stack.json").exists():
            self._landfall("down", "--wipe")
        images = self.state_dir / "images.json"
        images.write_text(json.dumps({CAMPAIGN_IMAGE: [sys.executable, "-m", "tests.campaign.checkpoint_trainer"]}))
        ports = [a for name in stack.SERVICE_ORDER for a in ("--port", f"{name}=0")]
        done = self._landfall("up", *ports, extra_env={**STACK_SETTINGS, stack.VERTEX_IMAGES_ENV: str(images)})
        if done.returncode != 0:
            raise RuntimeError(f"landfall up failed ({done.returncode}):\n{done.stderr[-3000:]}")
        for line in (self.state_dir / "env").read_text().splitlines():
            key, _, value = line.removeprefix("export ").partition("=")
            self.env[key] = value
        os.environ.update(self.env)

    def down(self) -> None:
        self._landfall("down", "--wipe")

    def restart(self, service: str, env: dict[str, str] | None = None) -> None:
        """`landfall restart SERVICE [--env K=V]`; retried once (a restart racing a dying process)."""
        args = ["restart", service, *[a for k, v in (env or {}).items() for a in ("--env", f"{k}={v}")]]
        with self._lock:
            for _ in range(2):
                done = self._landfall(*args)
                if done.returncode == 0:
                    self.restarts += 1
                    return
            raise RuntimeError(f"landfall {' '.join(args)} failed:\n{done.stderr[-2000:]}")

    def alive(self, service: str) -> bool:
        return dict((s.name, up) for s, up in stack.status(self.state_dir)).get(service, False)

    def log_path(self, service: str) -> Path:
        return self.state_dir / "logs" / f"{service}.log"

    def bridge_log(self) -> Path:
        return self.log_path("bridge")

    # -- clients ------------------------------------------------------------------------------------------------
    def firestore(self) -> Any:
        from google.cloud import firestore

        if not hasattr(self, "_firestore"):
            self._firestore = firestore.Client(project=self.env["GOOGLE_CLOUD_PROJECT"])
        return self._firestore

    def bucket(self) -> Any:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        if not hasattr(self, "_bucket"):
            client = storage.Client(project=self.env["GOOGLE_CLOUD_PROJECT"], credentials=AnonymousCredentials())
            self._bucket = client.bucket(self.env["LANDFALL_LANDING_BUCKET"])
        return self._bucket

    def publisher(self) -> Any:
        from google.cloud import pubsub_v1

        if not hasattr(self, "_publisher"):
            self._publisher = pubsub_v1.PublisherClient()
        return self._publisher

    def publish(self, topic: str, data: bytes, **attributes: str) -> None:
        path = self.publisher().topic_path(self.env["GOOGLE_CLOUD_PROJECT"], topic)
        self.publisher().publish(path, data, **attributes).result(timeout=30)

    def vertex_address(self) -> str:
        return self.env["LANDFALL_VERTEX_ENDPOINT"]

    def set_vertex_faults(self, plan: dict) -> None:
        from deploy.vertex_emulator import control

        for _ in range(10):
            try:
                control.set_faults(self.vertex_address(), plan)
                return
            except Exception:  # the emulator may be restarting; the plan is set once it answers
                time.sleep(1)

    def trainer_lines(self, job_names: Iterable[str]) -> list[str]:
        """What the jobs' primary replicas logged, job after job in the order the emulator created them (its job
        ids grow with time)."""
        from deploy.local.persistence import vertex_dir
        from deploy.vertex_emulator.logs import replica_log_path

        lines: list[str] = []
        for job_id in sorted((name.rsplit("/", 1)[-1] for name in job_names), key=int):
            path = replica_log_path(vertex_dir(self.state_dir), job_id, "workerpool0-0")
            if path.is_file():
                lines += path.read_text(errors="replace").splitlines()
        return lines

    def labelled_jobs(self, run_id: str, regions: Iterable[str]) -> dict[str, str]:
        """Every Vertex job labelled with run_id in regions: job name -> JobState name."""
        import grpc
        from google.cloud import aiplatform_v1
        from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport

        if not hasattr(self, "_vertex"):
            channel = grpc.insecure_channel(self.vertex_address())
            self._vertex = aiplatform_v1.JobServiceClient(transport=JobServiceGrpcTransport(channel=channel))
        project = self.env["GOOGLE_CLOUD_PROJECT"]
        jobs: dict[str, str] = {}
        for region in sorted(set(regions)):
            for _ in range(5):
                try:
                    pager = self._vertex.list_custom_jobs(
                        request={
                            "parent": f"projects/{project}/locations/{region}",
                            "filter": f'labels.landfall-run-id="{run_id}"',
                        }
                    )
                    jobs.update({job.name: job.state.name for job in pager})
                    break
                except Exception:  # the emulator restarting: ask again
                    time.sleep(1)
        return jobs

    # -- Firestore reads ------------------------------------------------------------------------------------------
    def dataset(self, prefix: str) -> dict[str, Any] | None:
        doc = (
            self.firestore()
            .collection(self.topology.datasets_collection)
            .document(dataset_id_for(self.env["LANDFALL_LANDING_BUCKET"], prefix))
            .get()
        )
        return doc.to_dict() if doc.exists else None

    def versions(self, prefix: str) -> list[dict[str, Any]]:
        from google.cloud.firestore_v1.base_query import FieldFilter

        ds = dataset_id_for(self.env["LANDFALL_LANDING_BUCKET"], prefix)
        query = (
            self.firestore()
            .collection(self.topology.dataset_versions_collection)
            .where(filter=FieldFilter("dataset_id", "==", ds))
        )
        return [d.to_dict() for d in query.stream()]

    def runs(self, uri: str) -> list[dict[str, Any]]:
        from google.cloud.firestore_v1.base_query import FieldFilter

        query = (
            self.firestore()
            .collection(self.topology.runs_collection)
            .where(filter=FieldFilter("request.dataset.uri", "==", uri))
        )
        return [d.to_dict() for d in query.stream()]

    def run(self, run_id: str) -> dict[str, Any] | None:
        doc = self.firestore().collection(self.topology.runs_collection).document(run_id).get()
        return doc.to_dict() if doc.exists else None


def replica_pids(run_id: str) -> list[int]:
    """This stack's replica processes of run_id: their AIP_MODEL_DIR names the run."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if b"AIP_MODEL_DIR=" in environ and f"/runs/{run_id}/".encode() in environ:
            pids.append(int(entry.name))
    return pids


def kill(pids: Iterable[int]) -> int:
    killed = 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass
    return killed


def stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
