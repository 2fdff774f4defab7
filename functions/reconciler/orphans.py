"""The reconciler's look for orphans: every job labelled `landfall-run-id` in the job regions is matched with its run
(functions/records/orphans.py says which jobs no run accounts for). Each orphan is recorded once in the `orphans`
collection and logged; with LANDFALL_CANCEL_ORPHANS=true a job that has not ended is cancelled, the cancel claimed
on the record first so that two passes ask Vertex once."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from functions.errors import LandfallError
from functions.gcp.vertex import RUN_LABEL, JobView, VertexJobs
from functions.records.orphans import OrphanStep, cancel_claimed, cancel_noted, orphan_of
from schemas.orphan_record import OrphanRecord
from schemas.run_record import RunRecord

log = logging.getLogger("landfall.reconciler")

UNSTOPPABLE_JOB_STATES = frozenset(
    {
        "JOB_STATE_SUCCEEDED",
        "JOB_STATE_FAILED",
        "JOB_STATE_CANCELLED",
        "JOB_STATE_EXPIRED",
        "JOB_STATE_PARTIALLY_SUCCEEDED",
        "JOB_STATE_CANCELLING",
    }
)
"""Jobs that need no cancel: ended, or being cancelled."""


class Orphans(Protocol):
    def record(self, orphan: OrphanRecord) -> bool: ...
    def apply(self, orphan_id: str, step: OrphanStep) -> bool: ...


@dataclass(frozen=True)
class OrphanDeps:
    store: Orphans
    runs: Callable[[Iterable[str]], dict[str, RunRecord]]
    """The stored runs among some ids (the runs store's get_many)."""
    regions: tuple[str, ...]
    """Where jobs may run (settings.job_regions); the regions of the runs a pass sees are added."""
    cancel: bool
    """settings.cancel_orphans."""
    grace_seconds: int
    """Jobs younger than this are left alone (settings.submission_lease_seconds)."""


def find_orphans(
    deps: OrphanDeps,
    vertex: VertexJobs,
    *,
    now: datetime,
    also_regions: Iterable[str] = (),
    jobs_in: Callable[[str], list[JobView] | None] | None = None,
) -> Counter[str]:
    """One look through every region; counts: orphan (newly recorded), orphan-cancelled, orphan-error. `jobs_in`
    says which jobs a region's look judges (None: skip the region this pass); by default every labelled job."""
    counts: Counter[str] = Counter()
    for region in dict.fromkeys((*deps.regions, *also_regions)):
        if not region:
            continue
        try:
            listed = vertex.list_labelled(region) if jobs_in is None else jobs_in(region)
            if listed is None:
                continue
            jobs = listed
            runs = deps.runs({j.labels.get(RUN_LABEL, "") for j in jobs} - {""})
        except Exception as exc:  # one region's failure (a store, Vertex, a run that cannot be read) leaves the rest
            log.warning("orphans in %s not looked for this pass: %s: %s", region, type(exc).__name__, exc)
            counts["orphan-error"] += 1
            continue
        for job in jobs:
            orphan = orphan_of(job, runs.get(job.labels.get(RUN_LABEL, "")), now=now, grace_seconds=deps.grace_seconds)
            if orphan is None:
                continue
            try:
                counts.update(_handle(orphan, job, deps, vertex, now))
            except Exception as exc:
                log.warning("orphan job %s: not handled this pass: %s: %s", job.name, type(exc).__name__, exc)
                counts["orphan-error"] += 1
    return counts


def _handle(orphan: OrphanRecord, job: JobView, deps: OrphanDeps, vertex: VertexJobs, now: datetime) -> list[str]:
    said = []
    if deps.store.record(orphan):
        log.warning("orphan job %s (%s): %s", job.name, job.state, orphan.reason)
        said.append("orphan")
    if not deps.cancel or job.state in UNSTOPPABLE_JOB_STATES:
        return said
    if not deps.store.apply(orphan.orphan_id, cancel_claimed(now=now)):
        return said  # cancelled already, or another pass is asking right now
    try:
        outcome = "asked" if vertex.cancel(job.name) else "had-ended"
    except LandfallError as exc:
        outcome = f"error: {exc}"
    deps.store.apply(orphan.orphan_id, cancel_noted(outcome))
    log.warning("orphan job %s: cancel %s (LANDFALL_CANCEL_ORPHANS)", job.name, outcome)
    return [*said, "orphan-cancelled" if not outcome.startswith("error") else "orphan-error"]


__all__ = ["OrphanDeps", "Orphans", "find_orphans"]
