"""The life of one job: start its replicas, watch them, decide the outcome, stop everything.

One JobRunner thread per job. States follow Vertex (vertex.md, "Job states" and "Outcome rules"):

    PENDING --(every replica started)--> RUNNING --(workerpool0-0 exits 0)--> SUCCEEDED
                                                 --(any replica exits non-zero)--> FAILED (error code 3)
                                                 --(scheduling.timeout passed)--> FAILED (error code 4)
    any non-terminal state --(CancelCustomJob)--> CANCELLING --> CANCELLED (error code 1)

Every state change is written to the job table and published as a service line (events.py). When the job
ends, every replica group still alive is stopped (children included).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from google.cloud.aiplatform_v1.types import CustomJob, JobState
from google.rpc import code_pb2, status_pb2

from deploy.topology import storage_as
from deploy.vertex_emulator import events
from deploy.vertex_emulator.faults import SPOT_RESTART_LIMIT, FaultPlan, mode_of, stockout_hit, stockout_message
from deploy.vertex_emulator.host_env import host_environment
from deploy.vertex_emulator.launch import LaunchError, ReplicaSlot, replica_command, replica_environment, replica_slots
from deploy.vertex_emulator.logs import PROCESSES_FILE, job_dir, replica_log_path
from deploy.vertex_emulator.replicas import ReplicaLaunch, ReplicaProcess, record_processes, stop_all
from deploy.vertex_emulator.store import JobStore
from deploy.vertex_emulator.wellknown import duration_of, timestamp

TERMINAL_STATES = frozenset(
    {JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED, JobState.JOB_STATE_CANCELLED, JobState.JOB_STATE_EXPIRED}
)
CANCELLED_MESSAGE = "CustomJob was cancelled."
PRIMARY_REPLICA = "workerpool0-0"


def replica_failed_message(replica: str, status: int) -> str:
    """Vertex's message for a replica that exited with a non-zero status."""
    return f"The replica {replica} exited with a non-zero status of {status}. Termination reason: Error."


def exit_status(returncode: int) -> int:
    """The status a container reports: a process killed by signal N exits with 128 + N (Popen says -N)."""
    return 128 - returncode if returncode < 0 else returncode


def timeout_message(seconds: float) -> str:
    """The emulator's message for a job that ran past job_spec.scheduling.timeout."""
    return f"The job ran longer than its scheduling timeout of {seconds:g} seconds and was stopped."


def now() -> datetime:
    return datetime.now(UTC)


CODE_ENV_CACHE = "LANDFALL_CODE_ENV_CACHE"
WORK_DIR_ENV = "LANDFALL_WORK_DIR"
"""Where a replica's launcher makes its node folders (trainer/user_code.py, trainer/launcher.py); unset: the TMPDIR."""


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class RunnerSettings:
    """How the emulator runs replicas.

    cwd: working directory of every replica (the repository root). base_env: the emulator's own environment, of
    which a replica gets only what host_env.py allows, with its Vertex variables added. images: local entrypoints
    for container images.
    poll_seconds: how often replicas are checked. stop_grace_seconds: SIGTERM-to-SIGKILL grace when stopping.
    max_nproc_per_node: cap on LANDFALL_NPROC_PER_NODE (e.g. 2 on a small CPU machine running an 8-GPU plan).
    """

    cwd: Path
    base_env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    images: Mapping[str, Sequence[str]] = field(default_factory=dict)
    poll_seconds: float = 0.05
    stop_grace_seconds: float = 5.0
    max_nproc_per_node: int | None = None


@dataclass(frozen=True)
class Outcome:
    """How a job ended: its final state, the error (if any) and the service lines to publish."""

    state: JobState
    error: status_pb2.Status | None = None
    lines: tuple[events.ServiceLine, ...] = ()


class JobRunner:
    """Runs one job on a background thread; `cancel()` and `request_shutdown()` may be called from any thread."""

    def __init__(
        self,
        job_id: str,
        *,
        store: JobStore,
        publisher: events.EventPublisher,
        settings: RunnerSettings,
        project: str,
        region: str,
        faults: FaultPlan,
        on_exit: Callable[[str], None] = lambda job_id: None,
    ) -> None:
        self.job_id = job_id
        self._store = store
        self._publisher = publisher
        self._settings = settings
        self._project = project
        self._region = region
        self._faults = faults
        self._on_exit = on_exit
        self._cancel = threading.Event()
        self._shutdown = threading.Event()
        self._processes: list[ReplicaProcess] = []
        self._running = False
        self._thread = threading.Thread(target=self._run, name=f"vertex-job-{job_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        """Ask the job to stop; the runner moves it to CANCELLED once its processes are gone."""
        self._cancel.set()

    def request_shutdown(self) -> None:
        """Start stopping the job's processes because the emulator exits; the job's state is left as it is."""
        self._shutdown.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    # -- the job's life ---------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            outcome = self._start_replicas()
            if outcome is None and self._running:
                outcome = self._watch()
            if outcome is not None:
                self._stop_all()
                self._finish(outcome)
        finally:
            self._stop_all()
            self._on_exit(self.job_id)

    def _start_replicas(self) -> Outcome | None:
        """Start every replica and mark the job RUNNING; an Outcome when it ends before running (stockout, launch
        failure, cancel); None when it runs or the emulator is shutting down."""
        job = self._store.get(self.job_id)
        if job is None:
            return None
        if stockout_hit(self._faults.current(), job.job_spec, self._region):
            return self._failure(stockout_message(self._region), code_pb2.RESOURCE_EXHAUSTED)
        slots = replica_slots(job.job_spec)
        ports = {slot.name: free_port() for slot in slots}
        try:
            launches = [self._launch(job, slot, ports) for slot in slots if not slot.idle]
        except LaunchError as error:
            return self._failure(str(error), code_pb2.FAILED_PRECONDITION)
        for launch in launches:
            if self._cancel.is_set() or self._shutdown.is_set():
                break
            process = ReplicaProcess(launch)
            try:
                process.start()
            except OSError as error:
                return self._failure(
                    f"The replica {launch.name} could not be started: {error}. Command: {' '.join(launch.argv)}",
                    code_pb2.FAILED_PRECONDITION,
                )
            self._processes.append(process)
        record_processes(job_dir(self._store.state_dir, self.job_id) / PROCESSES_FILE, self._processes)
        if self._cancel.is_set():
            return self._cancelled()
        if self._shutdown.is_set():
            return None
        if self._set_state(JobState.JOB_STATE_RUNNING, start=True):
            self._publisher.emit(events.ServiceLine(self.job_id, events.RUNNING))
        self._running = True
        return None

    def _launch(self, job: CustomJob, slot: ReplicaSlot, ports: Mapping[str, int]) -> ReplicaLaunch:
        spec = job.job_spec.worker_pool_specs[slot.pool]
        # Environments of teams' code, cached by content for the whole host (trainer/user_code.py).
        env = {**host_environment(self._settings.base_env), CODE_ENV_CACHE: str(self._store.state_dir / "code-envs")}
        # The replica's local disk: its node folders (a team's code, the shards read once) live under the job's own
        # folder, so what a killed replica could not remove stays with the job instead of piling up in /tmp.
        disk = job_dir(self._store.state_dir, self.job_id) / "disk" / slot.name
        disk.mkdir(parents=True, exist_ok=True)
        env[WORK_DIR_ENV] = str(disk)
        if job.job_spec.service_account and env.get("STORAGE_EMULATOR_HOST"):
            # The job's Cloud Storage calls carry its identity, as its credentials do on Vertex: the stack's storage
            # gate checks them against that account's grants. A job naming none runs as Vertex's own service agent,
            # which holds the project's storage: the owner's endpoint.
            env["STORAGE_EMULATOR_HOST"] = storage_as(
                env["STORAGE_EMULATOR_HOST"], f"serviceAccount:{job.job_spec.service_account}"
            )
        env.update(
            replica_environment(
                job,
                job_id=self.job_id,
                project=self._project,
                slot=slot,
                ports=ports,
                max_nproc_per_node=self._settings.max_nproc_per_node,
            )
        )
        return ReplicaLaunch(
            name=slot.name,
            argv=replica_command(spec, self._settings.images),
            env=env,
            cwd=self._settings.cwd,
            log_path=replica_log_path(self._store.state_dir, self.job_id, slot.name),
            mark=WORK_DIR_ENV,  # the replica's own disk folder: what it starts outside its group is stopped too
        )

    def _watch(self) -> Outcome | None:
        """Poll the replicas until the job has an outcome (None: the emulator is shutting down)."""
        job = self._store.get(self.job_id)
        limit = duration_of(job.job_spec.scheduling.timeout) if job else None
        timeout = limit.total_seconds() if limit else 0
        spot = mode_of(job.job_spec).preemptible if job else False
        started = last_start = time.monotonic()
        preemptions = 0
        while not self._shutdown.is_set():
            if self._cancel.is_set():
                return self._cancelled()
            if timeout and time.monotonic() - started > timeout:
                return self._failure(timeout_message(timeout), code_pb2.DEADLINE_EXCEEDED)
            cut = self._faults.current().job_timeout  # a fault: the job's timeout as if it were this short
            if cut is not None and time.monotonic() - started > cut.after_seconds:
                return self._failure(timeout_message(cut.after_seconds), code_pb2.DEADLINE_EXCEEDED)
            preemption = self._faults.current().spot_preemption if spot else None
            running_for = time.monotonic() - last_start
            if preemption and preemptions < preemption.times and running_for > preemption.after_seconds:
                preemptions += 1
                if preemptions > SPOT_RESTART_LIMIT:
                    return self._failure(stockout_message(self._region), code_pb2.RESOURCE_EXHAUSTED)
                self._preempt(preemption.grace_seconds, preemptions)
                last_start = time.monotonic()
                continue
            outcome = self._replica_outcome()
            if outcome is not None:
                return outcome
            self._shutdown.wait(self._settings.poll_seconds)
        return None

    def _replica_outcome(self) -> Outcome | None:
        """SUCCEEDED once workerpool0-0 exited 0, FAILED once any replica exited non-zero, else None."""
        for process in self._processes:
            status = process.poll()
            if status is None:
                continue
            if status != 0:
                message = replica_failed_message(process.name, exit_status(status))
                return self._failure(message, code_pb2.INVALID_ARGUMENT)
            if process.name == PRIMARY_REPLICA:
                return Outcome(JobState.JOB_STATE_SUCCEEDED, lines=(events.ServiceLine(self.job_id, events.SUCCEEDED),))
        return None

    def _preempt(self, grace_seconds: float, count: int) -> None:
        """Imitate a spot preemption: stop every replica (SIGTERM, grace, SIGKILL), then start it again with the
        same command and environment (the trainer resumes from AIP_CHECKPOINT_DIR)."""
        self._publisher.emit(events.ServiceLine(self.job_id, events.preempted_line(count), "WARNING"))
        stop_all(self._processes, grace_seconds)
        for process in self._processes:
            process.start()
        record_processes(job_dir(self._store.state_dir, self.job_id) / PROCESSES_FILE, self._processes)

    def _failure(self, message: str, code: int) -> Outcome:
        return Outcome(
            JobState.JOB_STATE_FAILED,
            status_pb2.Status(code=code, message=message),
            (
                events.ServiceLine(self.job_id, message, "ERROR"),
                events.ServiceLine(self.job_id, events.FAILED, "ERROR"),
            ),
        )

    def _cancelled(self) -> Outcome:
        return Outcome(
            JobState.JOB_STATE_CANCELLED,
            status_pb2.Status(code=code_pb2.CANCELLED, message=CANCELLED_MESSAGE),
            (events.ServiceLine(self.job_id, events.CANCELLED),),
        )

    def _stop_all(self) -> None:
        stop_all(self._processes, self._settings.stop_grace_seconds)
        (job_dir(self._store.state_dir, self.job_id) / PROCESSES_FILE).unlink(missing_ok=True)

    def _finish(self, outcome: Outcome) -> None:
        if self._set_state(outcome.state, error=outcome.error, end=True):
            for line in outcome.lines:
                self._publisher.emit(line)

    def _set_state(
        self, state: JobState, *, error: status_pb2.Status | None = None, start: bool = False, end: bool = False
    ) -> bool:
        """Move the job to `state` unless that would move it backwards; True when it moved."""
        moment = now()
        moved = False

        def change(job: CustomJob) -> bool:
            nonlocal moved
            if job.state in TERMINAL_STATES:
                return False
            if job.state == JobState.JOB_STATE_CANCELLING and state not in TERMINAL_STATES:
                return False
            job.state = state
            job.update_time = timestamp(moment)
            if start:
                job.start_time = timestamp(moment)
            if end:
                job.end_time = timestamp(moment)
            if error is not None:
                job.error = error
            moved = True
            return True

        self._store.update(self.job_id, change)
        return moved
