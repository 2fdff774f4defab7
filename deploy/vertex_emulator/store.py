"""The job table: every CustomJob the emulator knows, kept in memory and on disk.

Each job is one proto-JSON file (`DIR/jobs/<id>/job.json`, see logs.py) written atomically (temporary name,
then rename), so the table survives an emulator restart and a crash never leaves half a record. All access goes
through one lock; callers get copies, so a job they hold never changes under them.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, cast

from google.cloud.aiplatform_v1.types import CustomJob

from deploy.vertex_emulator.logs import JOB_FILE, job_dir

T = TypeVar("T")


def copy_job(job: CustomJob) -> CustomJob:
    """A deep copy of a job message."""
    # proto-plus annotates deserialize as returning Message; it returns an instance of the class it is called on.
    return cast(CustomJob, CustomJob.deserialize(CustomJob.serialize(job)))


def job_id_of(name: str) -> str:
    """The numeric id at the end of `projects/{p}/locations/{l}/customJobs/{id}`."""
    return name.rsplit("/", 1)[-1]


class JobStore:
    """Thread-safe job table backed by one JSON file per job under `state_dir/jobs/`."""

    def __init__(self, state_dir: Path) -> None:
        self._state_dir = Path(state_dir)
        self._lock = threading.Lock()
        self._jobs: dict[str, CustomJob] = {}
        self._last_id = 0
        (self._state_dir / "jobs").mkdir(parents=True, exist_ok=True)
        self._load()

    @property
    def state_dir(self) -> Path:
        return self._state_dir

    def _load(self) -> None:
        for path in sorted((self._state_dir / "jobs").glob(f"*/{JOB_FILE}")):
            # proto-plus annotates from_json as returning Message; it returns a CustomJob.
            job = cast(CustomJob, CustomJob.from_json(path.read_text(), ignore_unknown_fields=True))
            job_id = job_id_of(job.name)
            self._jobs[job_id] = job
            self._last_id = max(self._last_id, int(job_id))

    def new_id(self) -> str:
        """A fresh numeric id: microseconds since the epoch, strictly increasing, unique across restarts."""
        with self._lock:
            self._last_id = max(self._last_id + 1, time.time_ns() // 1000)
            return str(self._last_id)

    def put(self, job: CustomJob) -> None:
        """Insert or replace a job (keyed by the id in its name) and write it to disk."""
        with self._lock:
            self._write(copy_job(job))

    def get(self, job_id: str) -> CustomJob | None:
        """A copy of the job, or None when the id is unknown."""
        with self._lock:
            job = self._jobs.get(job_id)
            return copy_job(job) if job is not None else None

    def all(self) -> list[CustomJob]:
        """Copies of every job, oldest first."""
        with self._lock:
            return [copy_job(self._jobs[key]) for key in sorted(self._jobs, key=int)]

    def scan(self, look: Callable[[CustomJob], T | None]) -> list[T]:
        """What look answers for each job, oldest first, None answers left out: look reads the stored job under the
        lock (no copies: a read of every job, such as the jobs in flight a load test samples each second, stays
        cheap) and must not keep or change it."""
        with self._lock:
            found = (look(self._jobs[key]) for key in sorted(self._jobs, key=int))
            return [x for x in found if x is not None]

    def update(self, job_id: str, change: Callable[[CustomJob], bool | None]) -> CustomJob | None:
        """Apply `change` to the stored job under the lock and persist it; return a copy of the result.

        `change` may return False to leave the job as it was (nothing is written). Returns None for an
        unknown id.
        """
        with self._lock:
            current = self._jobs.get(job_id)
            if current is None:
                return None
            job = copy_job(current)
            if change(job) is False:
                return copy_job(current)
            self._write(job)
            return copy_job(job)

    def delete(self, job_id: str) -> bool:
        """Remove the job record (its replica logs stay). False when the id is unknown."""
        with self._lock:
            if self._jobs.pop(job_id, None) is None:
                return False
            (job_dir(self._state_dir, job_id) / JOB_FILE).unlink(missing_ok=True)
            return True

    def _write(self, job: CustomJob) -> None:
        job_id = job_id_of(job.name)
        folder = job_dir(self._state_dir, job_id)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{JOB_FILE}.tmp"
        tmp.write_text(CustomJob.to_json(job, use_integers_for_enums=False, indent=1))
        os.replace(tmp, folder / JOB_FILE)
        self._jobs[job_id] = job
