"""In-memory stand-in for the Vertex AI adapter (functions/gcp/vertex.py VertexJobs), for pure-logic tests.

It keeps real `aiplatform_v1.CustomJob` messages and answers through the adapter's own rules: `view()` turns a job
into a JobView and `translate_error()` turns a client error into CapacityError, TransientError or PermanentError.
A test scripts what Vertex does with `refuse` (the next CreateCustomJob in a region fails with a client error),
`crash_on_create` (the caller dies before or after the job is made) and `set_state` (the job moves on).
tests/integration/test_adapter_contracts.py checks it against the Vertex emulator.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import aiplatform_v1
from google.protobuf import timestamp_pb2

from functions.gcp.vertex import RUN_LABEL, JobView, translate_error, view

PROJECT = "landfall-local"


def job_state(name: str) -> aiplatform_v1.JobState:
    """The JobState called `name` (JOB_STATE_RUNNING), as the tests and Vertex's REST API spell it. (Without
    proto-plus's sources in mypy's view, JobState derives from Any and `JobState[name]` does not type-check.)"""
    return aiplatform_v1.JobState(aiplatform_v1.JobState.__members__[name])


def timestamp(at: datetime) -> timestamp_pb2.Timestamp:
    """`at` as the Timestamp a CustomJob time field is typed as (proto-plus reads it back as an aware datetime)."""
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(at)
    return stamp


def _at(field: timestamp_pb2.Timestamp) -> datetime:
    """A CustomJob time field as proto-plus reads it (an aware datetime; typed as the Timestamp it is stored as)."""
    value: object = field
    assert isinstance(value, datetime), type(value)
    return value


class Crash(BaseException):
    """The delivery's process died (not an error any handler catches): its lease is left to run out."""

    def __init__(self, *, after_creating: bool) -> None:
        super().__init__("the process died " + ("after" if after_creating else "before") + " the job was made")
        self.after_creating = after_creating


class FakeVertex:
    def __init__(self, project: str = PROJECT) -> None:
        self.project = project
        self.jobs: dict[str, aiplatform_v1.CustomJob] = {}
        self.create_calls: list[str] = []
        """The region of every CreateCustomJob call, in order (refused ones included)."""
        self._refusals: dict[str, list[BaseException]] = defaultdict(list)
        self._ids = itertools.count(7000000000000000001)
        self._lock = threading.Lock()
        self.cancelled: list[str] = []
        self.calls: Counter[str] = Counter()
        """JobService calls made through the adapter's interface, by method (ListCustomJobs counts its pages)."""
        self.page_size = 100
        """Jobs per ListCustomJobs page, as the adapter asks for them."""
        self.now: Callable[[], datetime] = lambda: datetime.now(UTC)
        """Vertex's clock: create, update and end times (a test sets its own)."""
        self.refuse_update_time = False
        """ListCustomJobs refuses a filter on update_time (INVALID_ARGUMENT), as a Vertex that does not support it
        would."""

    # scripting ------------------------------------------------------------------------------------------------
    def refuse(self, region: str, *errors: BaseException) -> None:
        """The next CreateCustomJob calls in `region` fail with these client errors (e.g. gexc.ResourceExhausted)
        or Crash, in order."""
        self._refusals[region].extend(errors)

    def crash_on_create(self, region: str, *, after_creating: bool) -> None:
        """The next CreateCustomJob in `region` kills the caller, after the job exists or before it is made."""
        self._refusals[region].append(Crash(after_creating=after_creating))

    def set_state(
        self,
        name: str,
        state: str,
        *,
        start: datetime | None = None,
        end: datetime | None = None,
        error: tuple[int, str] | None = None,
    ) -> JobView:
        """Move a job on, as Vertex would: its JobState name, start and end times, and error status."""
        with self._lock:
            job = self.jobs[name]
            job.state = job_state(state)
            job.update_time = timestamp(self.now())
            if start is not None:
                job.start_time = timestamp(start)
            if end is not None:
                job.end_time = timestamp(end)
            if error is not None:
                job.error = {"code": error[0], "message": error[1]}
            return view(job)

    # the adapter's interface ------------------------------------------------------------------------------------
    def parent(self, region: str) -> str:
        return f"projects/{self.project}/locations/{region}"

    def create(self, region: str, custom_job: dict[str, Any]) -> JobView:
        with self._lock:
            self.calls["CreateCustomJob"] += 1
            self.create_calls.append(region)
            refusal = self._refusals[region].pop(0) if self._refusals[region] else None
            if isinstance(refusal, Crash) and not refusal.after_creating:
                raise refusal
            if refusal is not None and not isinstance(refusal, Crash):
                raise translate_error(refusal, f"CreateCustomJob in {region}", region) from refusal  # type: ignore[arg-type]
            job = aiplatform_v1.CustomJob(custom_job)
            job.name = f"{self.parent(region)}/customJobs/{next(self._ids)}"
            job.state = job_state("JOB_STATE_PENDING")
            job.create_time = timestamp(self.now())
            job.update_time = job.create_time
            self.jobs[job.name] = job
            if refusal is not None:
                raise refusal
            return view(job)

    def get(self, name: str) -> JobView:
        with self._lock:
            self.calls["GetCustomJob"] += 1
            job = self.jobs.get(name)
            if job is None:
                missing = gexc.NotFound(f'The CustomJob "{name}" does not exist.')
                raise translate_error(missing, f"GetCustomJob {name}") from missing
            return view(job)

    def cancel(self, name: str) -> bool:
        """CancelCustomJob: the job goes CANCELLED at once with error code 1 (the emulator passes CANCELLING)."""
        with self._lock:
            self.calls["CancelCustomJob"] += 1
            job = self.jobs.get(name)
            if job is None:
                missing = gexc.NotFound(f'The CustomJob "{name}" does not exist.')
                raise translate_error(missing, f"CancelCustomJob {name}") from missing
            if job.state.name in (
                "JOB_STATE_SUCCEEDED",
                "JOB_STATE_FAILED",
                "JOB_STATE_CANCELLED",
                "JOB_STATE_EXPIRED",
            ):
                return False
            job.state = job_state("JOB_STATE_CANCELLED")
            job.error = {"code": 1, "message": "CustomJob was cancelled."}
            job.end_time = timestamp(self.now())
            job.update_time = job.end_time
            self.cancelled.append(name)
            return True

    def _listed(self, jobs: list[aiplatform_v1.CustomJob]) -> list[JobView]:
        """One ListCustomJobs answer, counted a call per page (at least one)."""
        self.calls["ListCustomJobs"] += max(1, -(-len(jobs) // self.page_size))
        return [view(j) for j in jobs]

    def list_labelled(self, region: str, *, page_size: int = 100) -> list[JobView]:
        with self._lock:
            prefix = f"{self.parent(region)}/customJobs/"
            return self._listed([j for j in self.jobs.values() if j.name.startswith(prefix) and RUN_LABEL in j.labels])

    def list_changed(
        self, region: str, *, updated_since: str, created_since: str, page_size: int = 100
    ) -> list[JobView]:
        """Labelled jobs updated at or after updated_since or created at or after created_since (RFC 3339)."""
        if self.refuse_update_time:
            refused = gexc.InvalidArgument('Unsupported filter field "update_time".')
            raise translate_error(refused, f"ListCustomJobs in {region}", region) from refused
        updated, created = (datetime.fromisoformat(t.replace("Z", "+00:00")) for t in (updated_since, created_since))
        with self._lock:
            prefix = f"{self.parent(region)}/customJobs/"
            return self._listed(
                [
                    j
                    for j in self.jobs.values()
                    if j.name.startswith(prefix)
                    and RUN_LABEL in j.labels
                    and (_at(j.update_time) >= updated or _at(j.create_time) >= created)
                ]
            )

    def find_by_run(self, region: str, run_id: str) -> JobView | None:
        with self._lock:
            self.calls["ListCustomJobs"] += 1
            prefix = f"{self.parent(region)}/customJobs/"
            jobs = [
                view(j)
                for j in reversed(self.jobs.values())  # newest first, as ListCustomJobs answers
                if j.name.startswith(prefix) and j.labels.get(RUN_LABEL) == run_id
            ]
        return jobs[0] if jobs else None
