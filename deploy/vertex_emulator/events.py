"""Job events: the service lines Vertex logs for a job, delivered as a Logging sink would deliver them.

On Google Cloud a Logging sink routes `resource.type="ml_job"` entries to a Pub/Sub topic; each message's data
is the LogEntry as JSON. The emulator publishes the same shape to `projects/PROJECT/topics/TOPIC` on the Pub/Sub
emulator (PUBSUB_EMULATOR_HOST), in order, from one background thread so a slow publish never holds up a job.
The publisher client and the topic (created if absent) are set up lazily on the first event.
"""

from __future__ import annotations

import contextlib
import json
import queue
import sys
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from google.cloud import pubsub_v1

# Service lines Vertex writes (vertex.md, "Completion signal").
PROVISIONING = "Waiting for job to be provisioned."
RUNNING = "Job is running."
SUCCEEDED = "Job completed successfully."
FAILED = "Job failed."
# The emulator's own wording for states whose Vertex lines are not documented.
CANCELLING = "Job is being cancelled."
CANCELLED = "Job was cancelled."


def preempted_line(count: int) -> str:
    """The emulator's line when a spot preemption restarts the job's replicas (Vertex's wording is undocumented)."""
    return f"The job's Spot VMs were preempted (preemption {count}); restarting its replicas."


PUBLISH_TIMEOUT_SECONDS = 30.0


def rfc3339(moment: datetime) -> str:
    """UTC timestamp with microseconds and a Z, as Cloud Logging writes it."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class ServiceLine:
    """One line the service logs for a job."""

    job_id: str
    text: str
    severity: str = "INFO"


def log_entry(project: str, line: ServiceLine, moment: datetime) -> dict[str, Any]:
    """The Cloud Logging LogEntry (JSON form) for a service line of an `ml_job`."""
    stamp = rfc3339(moment)
    return {
        "insertId": uuid.uuid4().hex[:16],
        "logName": f"projects/{project}/logs/ml.googleapis.com%2F{line.job_id}",
        "resource": {
            "type": "ml_job",
            "labels": {"job_id": line.job_id, "project_id": project, "task_name": "service"},
        },
        "textPayload": line.text,
        "severity": line.severity,
        "timestamp": stamp,
        "receiveTimestamp": stamp,
    }


class EventPublisher:
    """Publishes service lines to the events topic in the order they were emitted.

    With topic None, events are not published (the emulator was started without --events-topic).
    """

    def __init__(self, project: str, topic: str | None) -> None:
        self._project = project
        self._topic = topic
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._client: pubsub_v1.PublisherClient | None = None
        self._thread = threading.Thread(target=self._run, name="vertex-emulator-events", daemon=True)
        if topic:
            self._thread.start()

    @property
    def topic_path(self) -> str | None:
        return f"projects/{self._project}/topics/{self._topic}" if self._topic else None

    def emit(self, line: ServiceLine) -> None:
        """Queue one service line for publishing (returns at once)."""
        if self._topic:
            self._queue.put(log_entry(self._project, line, datetime.now(UTC)))

    def close(self, timeout: float = 10.0) -> None:
        """Publish what is queued, then stop the background thread."""
        if self._topic and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout)

    def _publisher(self, topic_path: str) -> pubsub_v1.PublisherClient:
        if self._client is None:
            from google.api_core.exceptions import AlreadyExists
            from google.cloud import pubsub_v1

            self._client = pubsub_v1.PublisherClient()
            with contextlib.suppress(AlreadyExists):
                self._client.create_topic(name=topic_path)
        return self._client

    def _run(self) -> None:
        topic_path = self.topic_path
        if topic_path is None:  # never: the thread starts only with a topic
            return
        while (entry := self._queue.get()) is not None:
            try:
                future = self._publisher(topic_path).publish(
                    topic_path,
                    json.dumps(entry).encode(),
                    **{"logging.googleapis.com/timestamp": entry["timestamp"]},
                )
                future.result(timeout=PUBLISH_TIMEOUT_SECONDS)
            except Exception as error:  # the job goes on; the lost event is reported on stderr
                print(
                    f"vertex emulator: could not publish job event {entry['textPayload']!r} for job "
                    f"{entry['resource']['labels']['job_id']} to {topic_path}: {error}. "
                    "Check that the Pub/Sub emulator named by PUBSUB_EMULATOR_HOST is running.",
                    file=sys.stderr,
                    flush=True,
                )
