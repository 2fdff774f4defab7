"""What Landfall reads from a Vertex AI CustomJob, and the label that ties a job to its run.

The Vertex adapter (functions/gcp/vertex.py) turns a client's CustomJob into a JobView; the rules that read jobs
(functions/records: long waits, orphans) and the handlers take JobViews, so no rule imports the adapter.
"""

from __future__ import annotations

from dataclasses import dataclass

RUN_LABEL = "landfall-run-id"
"""The label every Landfall CustomJob carries: the run id, so a job can be found again by its run."""


@dataclass(frozen=True)
class JobView:
    """What Landfall reads from a CustomJob."""

    name: str
    job_id: str
    region: str
    display_name: str
    state: str
    """JobState name, e.g. JOB_STATE_RUNNING."""
    error_code: int
    error_message: str
    create_time: str
    start_time: str
    end_time: str
    labels: dict[str, str]
