"""A request's free `labels`: the team's own, beside the labels Landfall puts on the run's Vertex jobs.

Keys `landfall` and `landfall-*` are Landfall's alone: its jobs are found by them (`landfall-run-id`), canaries told
apart (`landfall-phase`) and models registered under a route (`landfall-route`). A request naming one is refused,
naming the label, except `landfall-route`, which ingest sets on the requests it makes; the dispatcher accepts it only
when it names the route that owns the dataset (functions/dispatch/request_rules.py).

Google's labels hold at most 64 on a resource (the label rules CustomJob.labels points to, https://goo.gl/xmQnxf:
"Maximum 64 labels per resource"), so a request may carry at most 64 less Landfall's own, and Landfall's labels
always fit on the job.
"""

from __future__ import annotations

from schemas.canary import CANARY_LABEL
from schemas.errors import SchemaError
from schemas.job_view import RUN_LABEL
from schemas.model_version import ROUTE_LABEL

LABEL_PREFIX = "landfall-"
LANDFALL_LABEL = "landfall"
"""The label every Landfall job carries (value `run`), beside the run's id."""
LANDFALL_JOB_LABELS = (LANDFALL_LABEL, RUN_LABEL, CANARY_LABEL, ROUTE_LABEL)
"""Every label Landfall may set on a job."""
VERTEX_MAX_LABELS = 64
MAX_REQUEST_LABELS = VERTEX_MAX_LABELS - len(LANDFALL_JOB_LABELS)
"""The most labels of its own a request may carry, so that Landfall's always fit on the job."""
INGEST_LABELS = (ROUTE_LABEL,)
"""Landfall's labels that ingest writes on the requests it makes (checked by the dispatcher, not refused here)."""


def is_landfalls(key: str) -> bool:
    """Whether a label key is Landfall's own."""
    return key == LANDFALL_LABEL or key.startswith(LABEL_PREFIX)


def check_labels(labels: dict[str, str], field: str) -> dict[str, str]:
    """labels, once none is Landfall's (but INGEST_LABELS) and the team's own fit beside Landfall's on a job."""
    for key in labels:
        if is_landfalls(key) and key not in INGEST_LABELS:
            shown = key if len(key) <= 80 else f"{key[:80]}..."
            raise SchemaError(
                f"{shown!r} is Landfall's own label (keys {LANDFALL_LABEL!r} and {LABEL_PREFIX}* are set by Landfall "
                "on its jobs); choose a key without that prefix",
                field=field,
            )
    own = sum(1 for key in labels if not is_landfalls(key))
    if own > MAX_REQUEST_LABELS:
        raise SchemaError(
            f"has {own} labels; a request may carry at most {MAX_REQUEST_LABELS}: Vertex AI holds "
            f"at most {VERTEX_MAX_LABELS} on a job, and Landfall's own {len(LANDFALL_JOB_LABELS)} "
            f"({', '.join(LANDFALL_JOB_LABELS)}) must fit beside them",
            field=field,
        )
    return labels
