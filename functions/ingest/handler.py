"""Ingest: an object event on a landing bucket. A `_SUCCESS` marker or a satisfied `_MANIFEST.json` completes its
dataset (the folder holding it); quiet-period datasets are closed by the sweep (functions/ingest/sweep.py). Each
dataset version publishes exactly one TrainingRequest, through the version outbox in Firestore, and each content
(the same objects) is published once: a version whose content was published before is a DUPLICATE of that run
(functions/ingest/retrain.py asks for another run on purpose).

Every outcome is returned as a short string (for logs and tests); only TransientError asks for a redelivery.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from deploy.routes import Route
from functions.beside import beside
from functions.envelopes import ObjectEvent
from functions.errors import PermanentError, TransientError
from functions.fault_points import fault_point
from functions.gcp.datasets_store import DatasetsStore
from functions.gcp.gcs_objects import ObjectInfo
from functions.ingest.dataset_names import Role, ancestor_prefixes, name_problem, quiet_dataset_prefix, role_of, split
from functions.ingest.manifest import Entry, ManifestError
from functions.ingest.readiness import Completion, Scan, Verdict, evaluate, read_manifest, scan_prefix
from functions.ingest.routes import load_routes, route_for
from functions.records.dataset_versions import VersionOutcome
from functions.records.leases import ClaimOutcome
from functions.settings import Settings
from schemas.content_record import ContentRecord
from schemas.dataset_record import (
    DATASET_STATUS_OF_VERSION,
    DatasetRecord,
    DatasetStatus,
    VersionStatus,
    VersionSummary,
    content_key_for,
    dataset_id_for,
)
from schemas.dataset_version import DatasetVersion
from schemas.times import format_timestamp
from schemas.training_request import DatasetRef, TrainingRequest, run_id_for

log = logging.getLogger("landfall.ingest")


class ObjectStore(Protocol):
    def list(self, bucket: str, prefix: str) -> Iterator[ObjectInfo]: ...
    def stat(self, bucket: str, name: str) -> ObjectInfo | None: ...
    def read(self, bucket: str, name: str, generation: str, max_bytes: int) -> bytes | None: ...


@dataclass(frozen=True)
class IngestDeps:
    settings: Settings
    objects: ObjectStore
    datasets: DatasetsStore
    publish: Callable[[bytes], str]
    """Publishes a TrainingRequest on the requests topic; returns the message id."""
    now: Callable[[], datetime]
    routes: Callable[[], tuple[Route, ...]] = load_routes


def handle_object_event(event: ObjectEvent, deps: IngestDeps) -> str:
    if event.kind != "finalize":
        log.debug("ignoring %s event for gs://%s/%s: only new objects matter", event.kind, event.bucket, event.name)
        return f"ignored:{event.kind}"
    problem = name_problem(event.name)
    if problem:
        log.warning("ignoring gs://%s/%r: %s", event.bucket, event.name[:200], problem)
        return "ignored:bad-name"
    if event.bucket not in deps.settings.allowed_buckets:
        log.warning(
            "ignoring gs://%s/%s: bucket is not a landing bucket (%s); set LANDFALL_ALLOWED_BUCKETS to add it",
            event.bucket,
            event.name,
            ", ".join(deps.settings.allowed_buckets),
        )
        return "ignored:outside-landing-area"
    route = route_for(event.bucket, event.name, deps.routes())
    if route is None:
        log.info(
            "ignoring gs://%s/%s: no route in deploy/routes.toml covers it (prefixes: %s)",
            event.bucket,
            event.name,
            ", ".join(r.prefix for r in deps.routes()),
        )
        return "ignored:no-route"
    role = role_of(event.name[len(route.prefix) :])
    if role in (Role.MARKER, Role.MANIFEST):
        return _on_trigger(event, route, "marker" if role == Role.MARKER else "manifest", deps)
    if role == Role.DATA:
        return _on_data(event, route, deps)
    log.debug("gs://%s/%s is a %s object: it completes nothing by itself", event.bucket, event.name, role)
    return f"ignored:{role}"


def _on_trigger(event: ObjectEvent, route: Route, kind: str, deps: IngestDeps) -> str:
    prefix = split(event.name)[0]
    if len(prefix) <= len(route.prefix):
        log.warning(
            "ignoring gs://%s/%s: a dataset is a folder below %s, e.g. %sNAME/%s",
            event.bucket,
            event.name,
            route.prefix,
            route.prefix,
            split(event.name)[1],
        )
        return "ignored:marker-at-route-root"
    if kind not in route.readiness:
        log.warning(
            "ignoring gs://%s/%s: route %r completes datasets by %s, not by %s",
            event.bucket,
            event.name,
            route.name,
            " or ".join(route.readiness),
            kind,
        )
        return "ignored:readiness-not-enabled"
    # The object's stat goes on beside the outbox read: a first delivery needs both, one after the other they were
    # two round trips on the way to the claim.
    stat = beside(lambda: deps.objects.stat(event.bucket, event.name))
    # A marker's first delivery lists the prefix next: that listing goes beside them too (a manifest lists only
    # once it has read the manifest). A duplicate leaves it unread.
    listed = beside(lambda: scan_prefix(deps.objects.list(event.bucket, prefix), prefix)) if kind == "marker" else None
    unseen = False
    if event.generation:
        # Duplicates are the common case under redelivery: one read of the outbox settles them. The dataset
        # document comes in the same call, for the writes after a publish (one conditional Commit each).
        early = Completion(event.bucket, prefix, route, kind, event.name, event.generation, event.event_id)
        settled = deps.datasets.version(
            run_id_for(early.idempotency_key), dataset_id=dataset_id_for(event.bucket, prefix)
        )
        if settled is not None and settled.final:
            return _duplicate(early, settled, deps)
        unseen = settled is None
    current = stat.result()
    if current is None:
        log.info("ignoring gs://%s/%s#%s: it no longer exists", event.bucket, event.name, event.generation)
        return "ignored:gone"
    fault_point("ingest.after_read")
    generation = event.generation or current.generation
    if int(current.generation or 0) > int(generation or 0):
        log.info(
            "ignoring gs://%s/%s#%s: superseded by generation %s (a late notification)",
            event.bucket,
            event.name,
            generation,
            current.generation,
        )
        return "ignored:superseded"
    c = Completion(event.bucket, prefix, route, kind, event.name, generation, event.event_id)
    return complete(c, deps, scan=listed.result() if unseen and listed is not None else None, unseen=unseen)


def _on_data(event: ObjectEvent, route: Route, deps: IngestDeps) -> str:
    """A data object: it keeps a quiet-period dataset open; on a route completed only by a marker or a manifest it
    completes nothing, and is acknowledged before any Firestore or listing work.

    A sharded upload is thousands of these per dataset; each costing a Firestore read (to see whether a version
    waits on it) queued the deliveries behind the instance ceiling and aged markers into the dead-letter topic. A
    waiting version (a manifest's objects still landing, or a marker that landed before its data) is evaluated
    again by the sweep's next tick (every minute, functions/ingest/sweep.py) or by the next marker or manifest; on a
    quiet-period route, whose object events are read anyway, a data object wakes it at once."""
    quiet = quiet_dataset_prefix(event.name, route) if "quiet-period" in route.readiness else None
    if quiet is None:
        return "data"
    waits = "manifest" in route.readiness or "marker" in route.readiness
    manifest_prefixes = ancestor_prefixes(event.name, route) if waits else []
    prefixes = [*manifest_prefixes, quiet]
    docs = deps.datasets.datasets(dataset_id_for(event.bucket, p) for p in prefixes)
    outcomes = []
    for prefix in manifest_prefixes:
        waiting = docs.get(dataset_id_for(event.bucket, prefix))
        if waiting is not None and waiting.status == DatasetStatus.WAITING and waiting.version is not None:
            outcomes.append(complete(completion_from(waiting, route, event.event_id), deps))
    doc = docs.get(dataset_id_for(event.bucket, quiet))
    reopen = doc is None or (doc.status != DatasetStatus.COLLECTING and int(event.generation or 0) > doc.generation)
    if reopen and deps.datasets.mark_collecting(
        dataset_doc(
            event.bucket,
            quiet,
            route,
            DatasetStatus.COLLECTING,
            "",
            None if doc is None else doc.version,
            deps.now(),
        )
    ):
        log.info("quiet-period dataset gs://%s/%s is collecting objects", event.bucket, quiet)
    outcomes.append("collecting")
    return ",".join(outcomes)


def completion_from(doc: DatasetRecord, route: Route, event_id: str = "") -> Completion:
    """The waiting version a dataset document remembers (the caller has seen it has one)."""
    if doc.version is None:
        raise ValueError(f"dataset {doc.uri} shows no version to complete")
    version = doc.version
    return Completion(
        doc.bucket,
        doc.prefix,
        route,
        version.kind,
        version.completed_by.removeprefix(f"gs://{doc.bucket}/"),
        version.generation,
        event_id,
    )


def complete(c: Completion, deps: IngestDeps, *, scan: Scan | None = None, unseen: bool = False) -> str:
    """Evaluate one dataset version and publish its request, exactly once: claim the version, evaluate it, claim its
    content (a content published before makes the version a DUPLICATE of that run), publish, finish.

    unseen: the outbox read just found no such version (a first delivery, the common case). The version is then
    evaluated first and, when it makes a request, claimed with its content in one write that holds only if neither
    exists (DatasetsStore.claim_new): one Firestore call less on the way to the publish. A version or content that
    exists after all (another delivery, an earlier version of the same objects) goes the usual way below."""
    run_id = run_id_for(c.idempotency_key)
    owner = uuid.uuid4().hex
    lease_seconds = deps.settings.ingest_lease_seconds
    known: Verdict | None = None  # the fast path's evaluation, kept for the usual path (a listing moments old)
    if unseen and c.kind != "retrain":
        verdict = known = _verdict(c, deps, scan)
        if verdict.request is not None:
            content_key = content_key_for(c.bucket, c.prefix, verdict.content_digest)
            content = content_doc(c, run_id, verdict.content_digest, verdict.request.dataset, deps.now())
            if deps.datasets.claim_new(
                version_doc(c, run_id), content, owner=owner, now=deps.now(), lease_seconds=lease_seconds
            ):
                fault_point("ingest.after_claim")
                return _publish(c, run_id, owner, verdict.request, content_key, deps)
    claim = deps.datasets.claim_version(
        version_doc(c, run_id), owner=owner, now=deps.now(), lease_seconds=lease_seconds
    )
    if claim.outcome == ClaimOutcome.DONE:
        return _duplicate(c, claim.doc, deps)
    if claim.outcome == ClaimOutcome.BUSY:
        # Retried, not acknowledged: this may be the claim holder's own redelivery after it crashed.
        raise TransientError(
            f"{c.uri} version {c.generation} is being evaluated by another delivery; retry after "
            f"its lease ({lease_seconds} s)"
        )
    fault_point("ingest.after_claim")
    try:
        verdict = known if known is not None else _verdict(c, deps, scan)
        if verdict.request is None:
            return _not_ready(c, run_id, owner, verdict, deps)
        content_key = content_key_for(c.bucket, c.prefix, verdict.content_digest)
        claimed = deps.datasets.claim_content(
            content_doc(c, run_id, verdict.content_digest, verdict.request.dataset, deps.now()),
            now=deps.now(),
            retrain=c.kind == "retrain",
        )
        if claimed.outcome == ClaimOutcome.DONE:
            return _same_content(c, run_id, owner, content_key, claimed.doc, verdict.request, deps)
        if claimed.outcome == ClaimOutcome.BUSY:
            raise TransientError(
                f"{c.uri} version {c.generation} holds the same objects as version "
                f"{claimed.doc.generation}, which another delivery is publishing now; "
                "retry after its lease to see whether it was published"
            )
    except BaseException:
        # Let the next delivery take over at once rather than after the lease.
        deps.datasets.finish_version(run_id, owner=owner, status=VersionStatus.CLAIMED, now=deps.now())
        raise
    return _publish(c, run_id, owner, verdict.request, content_key, deps)


def _publish(
    c: Completion, run_id: str, owner: str, request: TrainingRequest, content_key: str, deps: IngestDeps
) -> str:
    """Publish the request of a version whose claim and content this delivery holds, and record that it did."""
    try:
        try:
            message_id = deps.publish(request.to_json())
        except Exception as exc:
            refusal = _publish_refusal(exc)
            if refusal is None:
                raise
            return _not_ready(c, run_id, owner, Verdict(reason=f"{c.uri}: {refusal}"), deps)
    except BaseException:
        # Let the next delivery take over at once rather than after the lease.
        deps.datasets.finish_version(run_id, owner=owner, status=VersionStatus.CLAIMED, now=deps.now())
        raise
    fault_point("ingest.after_publish")
    deps.datasets.finish_version(
        run_id,
        owner=owner,
        status=VersionStatus.PUBLISHED,
        now=deps.now(),
        outcome=VersionOutcome(
            message_id=message_id,
            request=request.to_dict(),
            reason="",
            content_key=content_key,
            answered=False,
        ),
    )
    fault_point("ingest.after_mark_published")
    deps.datasets.save_dataset(
        dataset_doc(
            c.bucket,
            c.prefix,
            c.route,
            DatasetStatus.REQUESTED,
            "",
            version_summary(c, run_id, VersionStatus.PUBLISHED, content_key=content_key),
            deps.now(),
        )
    )
    stats = request.dataset
    log.info(
        "dataset %s complete (%s %s; %d objects, %d bytes, %s): request for run %s published as message %s",
        c.uri,
        c.kind,
        c.generation,
        stats.object_count,
        stats.total_bytes,
        ",".join(stats.formats) or "-",
        run_id,
        message_id,
    )
    return f"published:{run_id}"


def _same_content(
    c: Completion,
    run_id: str,
    owner: str,
    content_key: str,
    content: ContentRecord,
    request: TrainingRequest,
    deps: IngestDeps,
) -> str:
    """This version holds what an earlier one published: record it as a DUPLICATE of that run, publish nothing."""
    earlier = content.run_id
    stats = request.dataset
    reason = (
        f"{c.uri} holds the same objects as the version trained as run {earlier} (generation "
        f"{content.generation}): {stats.object_count} data object(s), {stats.total_bytes} bytes, with "
        "the same names, sizes and checksums (landfall.json included), so it is not trained again. Run "
        f"`landfall retrain {c.uri}` to train it again on purpose"
    )
    deps.datasets.finish_version(
        run_id,
        owner=owner,
        status=VersionStatus.DUPLICATE,
        now=deps.now(),
        outcome=VersionOutcome(reason=reason, duplicate_of=earlier, content_key=content_key),
    )
    deps.datasets.save_dataset(
        dataset_doc(
            c.bucket,
            c.prefix,
            c.route,
            DatasetStatus.DUPLICATE,
            reason,
            version_summary(c, run_id, VersionStatus.DUPLICATE, content_key=content_key, duplicate_of=earlier),
            deps.now(),
        )
    )
    log.info("dataset %s (%s %s): same content as run %s; no request", c.uri, c.kind, c.generation, earlier)
    return f"same-content:{earlier}"


def _publish_refusal(exc: Exception) -> str | None:
    """Why the requests topic refused the request for good (it breaks the topic's schema), or None when exc is not
    a refusal and the delivery is retried as before."""
    from google.api_core.exceptions import InvalidArgument

    if isinstance(exc, InvalidArgument | PermanentError):
        return (
            f"the requests topic refused the TrainingRequest ({exc}): a value from the route or landfall.json "
            "is one the message schema (schemas/training_request.proto) cannot carry. Fix it, then land a new "
            "_SUCCESS marker or manifest"
        )
    return None


def _duplicate(c: Completion, version: DatasetVersion, deps: IngestDeps) -> str:
    """A version that was settled before: nothing is published again, and the dataset document is brought in line
    with the version's outcome if the delivery that settled it died before writing it (the fault campaign: a crash
    between marking the version PUBLISHED and writing the dataset document left the dataset unrecorded for good, as
    every redelivery stopped here)."""
    _repair_dataset(c, version, deps)
    log.info("%s version %s already %s: duplicate ignored", c.uri, c.generation, version.status)
    return f"duplicate:{version.status.value}"


def _repair_dataset(c: Completion, version: DatasetVersion, deps: IngestDeps) -> None:
    dataset_id = dataset_id_for(c.bucket, c.prefix)
    current = deps.datasets.datasets([dataset_id]).get(dataset_id)
    if current is not None and (
        (current.version is not None and current.version.run_id == version.run_id)
        or current.generation > int(c.generation or 0)
    ):
        return  # one plain read settles the common case: the dataset already shows this version or a newer one
    summary = version_summary(
        c,
        version.run_id,
        version.status,
        content_key=version.content_key or "",
        duplicate_of=version.duplicate_of or "",
    )
    if deps.datasets.save_dataset(
        dataset_doc(
            c.bucket,
            c.prefix,
            c.route,
            DATASET_STATUS_OF_VERSION[version.status],
            version.reason,
            summary,
            deps.now(),
        )
    ):
        log.warning(
            "dataset %s: its document did not show version %s (%s); written now", c.uri, c.generation, version.status
        )


def _verdict(c: Completion, deps: IngestDeps, scan: Scan | None) -> Verdict:
    def read(name: str, generation: str, max_bytes: int) -> bytes | None:
        return deps.objects.read(c.bucket, name, generation, max_bytes)

    entries: tuple[Entry, ...] = ()
    if c.kind == "manifest":
        try:
            entries = read_manifest(c, read)
        except ManifestError as exc:
            return Verdict(reason=f"{c.uri}: {exc}")
    if scan is None or entries:
        scan = scan_prefix(deps.objects.list(c.bucket, c.prefix), c.prefix, frozenset(e.name for e in entries))
    return evaluate(c, scan, read, entries, deps.now())


def _not_ready(c: Completion, run_id: str, owner: str, verdict: Verdict, deps: IngestDeps) -> str:
    version_status = VersionStatus.WAITING if verdict.waiting else VersionStatus.REFUSED
    deps.datasets.finish_version(
        run_id, owner=owner, status=version_status, now=deps.now(), outcome=VersionOutcome(reason=verdict.reason)
    )
    status = DatasetStatus.WAITING if verdict.waiting else DatasetStatus.REFUSED
    deps.datasets.save_dataset(
        dataset_doc(
            c.bucket, c.prefix, c.route, status, verdict.reason, version_summary(c, run_id, version_status), deps.now()
        )
    )
    log.warning("dataset %s (%s %s): no request: %s", c.uri, c.kind, c.generation, verdict.reason)
    return f"{status.lower()}:{run_id}"


def version_summary(
    c: Completion, run_id: str, status: VersionStatus, *, content_key: str = "", duplicate_of: str = ""
) -> VersionSummary:
    return VersionSummary(
        idempotency_key=c.idempotency_key,
        run_id=run_id,
        kind=c.kind,
        generation=c.generation,
        completed_by=f"gs://{c.bucket}/{c.object_name}",
        status=status,
        content_key=content_key or None,
        duplicate_of=duplicate_of or None,
    )


def content_doc(c: Completion, run_id: str, digest: str, stats: DatasetRef, now: datetime) -> ContentRecord:
    """The content record a version claims (the rules set its times and retrains)."""
    stamp = format_timestamp(now)
    return ContentRecord(
        content_key=content_key_for(c.bucket, c.prefix, digest),
        digest=digest,
        dataset_id=dataset_id_for(c.bucket, c.prefix),
        uri=c.uri,
        run_id=run_id,
        idempotency_key=c.idempotency_key,
        generation=c.generation,
        object_count=stats.object_count,
        total_bytes=stats.total_bytes,
        created_at=stamp,
        updated_at=stamp,
    )


def version_doc(c: Completion, run_id: str) -> DatasetVersion:
    """The version a delivery claims (the claim rule sets its owner, lease and times)."""
    return DatasetVersion(
        run_id=run_id,
        idempotency_key=c.idempotency_key,
        dataset_id=dataset_id_for(c.bucket, c.prefix),
        uri=c.uri,
        route=c.route.name,
        kind=c.kind,
        completed_by=f"gs://{c.bucket}/{c.object_name}",
        generation=c.generation,
        status=VersionStatus.CLAIMED,
        event_id=c.event_id,
    )


def dataset_doc(
    bucket: str,
    prefix: str,
    route: Route,
    status: DatasetStatus,
    reason: str,
    version: VersionSummary | None,
    now: datetime,
) -> DatasetRecord:
    return DatasetRecord(
        dataset_id=dataset_id_for(bucket, prefix),
        bucket=bucket,
        prefix=prefix,
        uri=f"gs://{bucket}/{prefix}",
        route=route.name,
        status=status,
        reason=reason,
        updated_at=format_timestamp(now),
        version=version,
    )
