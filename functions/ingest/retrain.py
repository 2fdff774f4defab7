"""`landfall retrain gs://BUCKET/PREFIX/`: train a dataset again on purpose.

Ingest trains each content of a dataset once: a version holding the same objects as an earlier one is a DUPLICATE
of that run. A retrain is the way to ask for another run anyway. It evaluates the folder as it is now (listing,
route rules, landfall.json), counts one more retrain on the content's document, and publishes through the same
outbox as any version, under the key `content:BUCKET/PREFIX:DIGEST:retrain-N`: every retrain is a new run, and the
dataset record names it.
"""

from __future__ import annotations

from dataclasses import dataclass

from functions.errors import PermanentError
from functions.ingest.handler import IngestDeps, complete, content_doc
from functions.ingest.readiness import Completion, scan_prefix
from schemas.dataset_record import DatasetStatus, content_key_for, dataset_id_for, retrain_key
from schemas.training_request import DatasetRef, run_id_for


class RetrainError(PermanentError):
    """The dataset cannot be retrained as it stands; the message says why and what to do."""


@dataclass(frozen=True)
class Retrain:
    outcome: str
    """complete()'s outcome: published:RUN_ID, or refused:RUN_ID when the folder now breaks a rule."""
    run_id: str
    idempotency_key: str
    count: int
    """This is the count-th retrain of this content."""


def retrain(bucket: str, prefix: str, deps: IngestDeps) -> Retrain:
    uri = f"gs://{bucket}/{prefix}"
    dataset_id = dataset_id_for(bucket, prefix)
    doc = deps.datasets.datasets([dataset_id]).get(dataset_id)
    if doc is None:
        raise RetrainError(
            f"no record of {uri}: only a dataset ingest has seen complete can be retrained "
            "(`landfall datasets` lists them)"
        )
    version = doc.version
    if doc.status in (DatasetStatus.COLLECTING, DatasetStatus.WAITING) or version is None:
        raise RetrainError(
            f"{uri} is {doc.status}: it is not complete yet, so there is nothing to train again "
            "(`landfall dataset URI` says what it waits for)"
        )
    route = next((r for r in deps.routes() if r.name == doc.route), None)
    if route is None:
        raise RetrainError(f"{uri} came through route {doc.route!r}, which deploy/routes.toml no longer has")
    scan = scan_prefix(deps.objects.list(bucket, prefix), prefix)
    completed_by = version.completed_by.removeprefix(f"gs://{bucket}/")
    # The content document is where retrains are counted: the count makes each retrain's key, so its run, new.
    unkeyed = Completion(bucket, prefix, route, "retrain", completed_by, version.generation)
    stats = DatasetRef(uri=uri, object_count=scan.count, total_bytes=scan.total_bytes)
    now = deps.now()
    counted = deps.datasets.count_retrain(content_doc(unkeyed, "", scan.content_digest, stats, now), now=now)
    count = counted.retrains
    key = retrain_key(content_key_for(bucket, prefix, scan.content_digest), count)
    c = Completion(bucket, prefix, route, "retrain", completed_by, version.generation, f"retrain-{count}", key)
    return Retrain(complete(c, deps, scan=scan), run_id_for(key), key, count)
