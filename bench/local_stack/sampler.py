"""A thread that samples the Vertex emulator's jobs in flight (its read-only GetJobsInFlight control call, which spends
no rate quota) every SAMPLE_EVERY_S while the load test runs, for the teams' GPU caps (bench/local_stack/limits.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from types import TracebackType

import grpc

from bench.local_stack.limits import Sample
from deploy.vertex_emulator.control import get_jobs_in_flight
from schemas.job_view import RUN_LABEL

SAMPLE_EVERY_S = 1.0


def _kinds(value: object) -> Mapping[str, int]:
    if not isinstance(value, dict):
        raise TypeError(f"GetJobsInFlight: expected gpus as {{accelerator type: count}}, found {value!r}")
    return {str(k): int(v) for k, v in value.items()}


class JobsSampler:
    """`with JobsSampler(address, started) as sampler:` samples until the block ends; sampler.samples then holds them
    (seconds since started, time.monotonic()), and sampler.errors the calls that failed (the test goes on)."""

    def __init__(self, address: str, started: float, every_s: float = SAMPLE_EVERY_S) -> None:
        self.address = address
        self.started = started
        self.every_s = every_s
        self.samples: list[Sample] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="jobs-sampler", daemon=True)

    def sample(self) -> Sample:
        at = time.monotonic() - self.started
        found = []
        for job in get_jobs_in_flight(self.address):
            labels = job.get("labels")
            run_id = labels.get(RUN_LABEL) if isinstance(labels, dict) else None
            if run_id:
                found.append((str(run_id), _kinds(job.get("gpus", {}))))
        return Sample(at, tuple(found))

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self.sample())
            except (grpc.RpcError, TypeError, ValueError) as exc:  # one failed sample is reported; sampling goes on
                self.errors.append(f"{time.monotonic() - self.started:.0f} s: {exc}")
            self._stop.wait(self.every_s)

    def __enter__(self) -> JobsSampler:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
