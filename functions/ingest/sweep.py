"""The ingest sweep, run on a schedule (Cloud Scheduler -> Pub/Sub tick): closes quiet-period datasets whose newest
object is older than the route's quiet period, and re-checks manifests still waiting on objects (a safety net for
notifications that never came). Datasets are swept one by one; a failure on one never stops the others, and the
next tick retries it.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta

from deploy.routes import Route
from functions.envelopes import PubSubMessage
from functions.errors import TransientError
from functions.ingest.handler import IngestDeps, complete, completion_from, dataset_doc, version_summary
from functions.ingest.readiness import Completion, scan_prefix
from schemas.dataset_record import DATASET_STATUS_OF_VERSION, DatasetRecord, DatasetStatus
from schemas.training_request import run_id_for

log = logging.getLogger("landfall.sweep")


def handle_sweep(message: PubSubMessage, deps: IngestDeps) -> str:
    counts: Counter[str] = Counter()
    routes = {r.name: r for r in deps.routes()}
    for doc in deps.datasets.open_datasets():
        route = routes.get(doc.route)
        if route is None:
            log.warning(
                "dataset %s names route %r, which deploy/routes.toml no longer has; left as is", doc.uri, doc.route
            )
            counts["no-route"] += 1
            continue
        try:
            if doc.status == DatasetStatus.WAITING and doc.version is not None:
                outcome = complete(completion_from(doc, route, f"sweep:{message.message_id}"), deps)
            else:
                outcome = close_if_quiet(doc, route, deps, f"sweep:{message.message_id}")
        except TransientError as exc:
            log.warning("sweep: %s left for the next tick: %s", doc.uri, exc)
            outcome = "retry"
        counts[outcome.split(":", 1)[0]] += 1
    summary = ", ".join(f"{k}={v}" for k, v in sorted(counts.items())) or "nothing open"
    return f"swept: {summary}"


def close_if_quiet(doc: DatasetRecord, route: Route, deps: IngestDeps, event_id: str) -> str:
    bucket, prefix = doc.bucket, doc.prefix
    now = deps.now()
    scan = scan_prefix(deps.objects.list(bucket, prefix), prefix)
    if scan.newest is None:
        log.info("quiet-period dataset gs://%s/%s holds no data objects (deleted?); still collecting", bucket, prefix)
        return "empty"
    quiet_for = now - scan.latest_update if scan.latest_update else timedelta(0)
    if quiet_for < timedelta(seconds=route.quiet_period_seconds):
        return "collecting"
    c = Completion(bucket, prefix, route, "quiet-period", scan.newest.name, scan.newest.generation, event_id)
    outcome = complete(c, deps, scan=scan)
    if outcome.startswith("duplicate:"):
        # This version was settled before (a late notification reopened the dataset): close it again as it was.
        run_id = run_id_for(c.idempotency_key)
        version = deps.datasets.version(run_id)
        if version is not None and version.status in DATASET_STATUS_OF_VERSION:
            summary = version_summary(
                c,
                run_id,
                version.status,
                content_key=version.content_key or "",
                duplicate_of=version.duplicate_of or "",
            )
            deps.datasets.save_dataset(
                dataset_doc(
                    bucket, prefix, route, DATASET_STATUS_OF_VERSION[version.status], version.reason, summary, now
                )
            )
    return outcome
