"""Helpers for the emulator contract tests: start the emulator as a separate process, reach it through
`aiplatform_v1.JobServiceClient`, read its job events from Pub/Sub, build CustomJobs running probe_job.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from google.api_core.exceptions import DeadlineExceeded
from google.cloud import aiplatform_v1, pubsub_v1
from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport

from tests.polling import wait_for

REPO_ROOT = Path(__file__).resolve().parents[3]
PROJECT = "landfall-local"
REGION = "us-central1"
PARENT = f"projects/{PROJECT}/locations/{REGION}"
PROBE_MODULE = "tests.integration.vertex_emulator.probe_job"
PROBE_IMAGE = "local/landfall-probe:latest"
"""A container image the module emulator maps (--images) to `python -m tests.integration.vertex_emulator.probe_job`."""
STARTUP_TIMEOUT_SECONDS = 120.0
"""A bound on failure only (a ready emulator is seen at once): under `make test` on two cores, with coverage in every
subprocess and the stack beside it, importing the emulator (aiplatform's types) took over 30 s once (a fresh-clone
.ci/run: four errors "timed out after 30s waiting for the emulator to listen"). The local stack allows 60 s a
service on its own (deploy/local/processes.py)."""
TERMINAL = (
    aiplatform_v1.JobState.JOB_STATE_SUCCEEDED,
    aiplatform_v1.JobState.JOB_STATE_FAILED,
    aiplatform_v1.JobState.JOB_STATE_CANCELLED,
)


@dataclass
class EmulatorProcess:
    """A running `python -m deploy.vertex_emulator` and a JobServiceClient connected to it."""

    process: subprocess.Popen
    address: str
    state_dir: Path
    log_path: Path
    client: aiplatform_v1.JobServiceClient = field(init=False)

    def __post_init__(self) -> None:
        channel = grpc.insecure_channel(self.address)
        self.client = aiplatform_v1.JobServiceClient(transport=JobServiceGrpcTransport(channel=channel))

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal the emulator and wait for it to exit; on a hang, kill it and fail with its log."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"emulator did not exit after {sig!r}:\n{self.log_path.read_text()[-4000:]}") from None

    def wait_terminal(self, name: str, timeout: float = 60.0) -> aiplatform_v1.CustomJob:
        """The job once it ended; past `timeout`, fail with its state and the emulator's log's end (what its
        replicas were doing)."""
        try:
            return wait_for(
                lambda: (job := self.client.get_custom_job(name=name)).state in TERMINAL and job,
                timeout,
                what=f"{name} to end",
            )
        except AssertionError as exc:
            state = self.client.get_custom_job(name=name).state.name
            raise AssertionError(
                f"{exc} (still {state}); the emulator's log ends:\n{self.log_path.read_text()[-3000:]}"
            ) from None

    def wait_state(self, name: str, state: aiplatform_v1.JobState, timeout: float = 60.0) -> aiplatform_v1.CustomJob:
        reached: aiplatform_v1.CustomJob = wait_for(  # typed here: proto-plus's enum == answers Any
            lambda: (job := self.client.get_custom_job(name=name)).state == state and job,
            timeout,
            what=f"{name} to reach {state.name}",
        )
        return reached


def launch_emulator(
    state_dir: Path, log_path: Path, args: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> EmulatorProcess:
    """Start the emulator on a free port (with `env` added to this process's environment) and wait until it prints
    that it is listening."""
    log = open(log_path, "ab")  # noqa: SIM115 - the child writes to it after this function returns
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "deploy.vertex_emulator",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--project",
            PROJECT,
            "--state-dir",
            str(state_dir),
            "--stop-grace",
            "2",
            *args,
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()

    def listening() -> str | None:
        if process.poll() is not None:
            raise AssertionError(f"emulator exited with {process.returncode}:\n{log_path.read_text()}")
        for line in log_path.read_text().splitlines():
            if line.startswith("Vertex emulator listening on "):
                return line.rsplit(" ", 1)[-1]
        return None

    address = wait_for(listening, STARTUP_TIMEOUT_SECONDS, what="the emulator to listen")
    return EmulatorProcess(process, address, state_dir, log_path)


def emulator_running(folder: Path, images: dict[str, list[str]]) -> EmulatorProcess:
    """An emulator in folder whose --images map runs each image as the given local command (a sleeper, an exit)."""
    mapping = folder / "images.json"
    mapping.write_text(json.dumps(images))
    return launch_emulator(folder / "state", folder / "emulator.log", ["--images", str(mapping)])


class JobEvents:
    """Job events from the events topic, read through a pull subscription, grouped by job id."""

    def __init__(self, subscription: str) -> None:
        self.subscription = subscription
        self.subscriber = pubsub_v1.SubscriberClient()
        self.by_job: dict[str, list[dict]] = defaultdict(list)

    def _pull(self) -> None:
        try:
            response = self.subscriber.pull(
                request={"subscription": self.subscription, "max_messages": 100}, timeout=0.5
            )
        except DeadlineExceeded:
            return
        for received in response.received_messages:
            entry = json.loads(received.message.data)
            self.by_job[entry["resource"]["labels"]["job_id"]].append(entry)
        if response.received_messages:
            self.subscriber.acknowledge(
                request={"subscription": self.subscription, "ack_ids": [m.ack_id for m in response.received_messages]}
            )

    def texts(self, job_id: str) -> list[str]:
        return [entry["textPayload"] for entry in self.by_job[job_id]]

    def wait_for_text(self, job_id: str, text: str, timeout: float = 60.0) -> list[dict]:
        """Every entry of the job once one with textPayload `text` has arrived."""

        def arrived() -> list[dict] | None:
            self._pull()
            return self.by_job[job_id] if text in self.texts(job_id) else None

        return wait_for(arrived, timeout, step=0.1, what=f'event "{text}" for job {job_id}')


def probe_pool(
    out: Path,
    *probe_args: str,
    replicas: int = 1,
    machine_type: str = "n1-standard-4",
    accelerator: tuple[str, int] | None = None,
    env: dict[str, str] | None = None,
) -> dict:
    """A worker pool spec running the probe module."""
    machine: dict = {"machine_type": machine_type}
    if accelerator:
        machine.update(accelerator_type=accelerator[0], accelerator_count=accelerator[1])
    return {
        "machine_spec": machine,
        "replica_count": replicas,
        "python_package_spec": {
            "executor_image_uri": "us-docker.pkg.dev/vertex-ai/training/pytorch-xla.2-4.py310:latest",
            "package_uris": ["gs://landfall-local/packages/probe.tar.gz"],
            "python_module": PROBE_MODULE,
            "args": ["--out", str(out), *probe_args],
            "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
        },
    }


def probe_job(
    pools: list[dict],
    *,
    display_name: str = "probe",
    labels: dict[str, str] | None = None,
    base_output: str | None = "gs://landfall-local/runs/r1",
    scheduling: dict | None = None,
) -> dict:
    """A CustomJob (as a dict the client accepts) made of the given pools."""
    spec: dict = {"worker_pool_specs": pools}
    if base_output:
        spec["base_output_directory"] = {"output_uri_prefix": base_output}
    if scheduling:
        spec["scheduling"] = scheduling
    return {"display_name": display_name, "labels": labels or {}, "job_spec": spec}


def process_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def job_id(job: aiplatform_v1.CustomJob) -> str:
    return job.name.rsplit("/", 1)[-1]


def read_json(path: Path, timeout: float = 60.0) -> dict:
    wait_for(path.exists, timeout, what=str(path))
    content: dict = json.loads(path.read_text())
    return content
