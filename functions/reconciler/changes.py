"""What a reconcile pass reads from Vertex: changes since the last pass, not every open run's job.

Per region and pass, one ListCustomJobs (plus its pages) asks for the jobs labelled `landfall-run-id` that were
updated since the shard's watermark less an overlap, or created within the orphan window:

    labels.landfall-run-id:* AND (update_time>="W - overlap" OR create_time>="W - orphan window")

W is when the shard's last complete pass in that region began (schemas/reconcile_watermark.py, kept in Firestore).
The listed jobs are matched to the open runs by job name; an open run whose job is not among them is not read,
unless one of these holds:

- the region has no watermark, or it is older than LANDFALL_RECONCILE_FULL_AFTER_SECONDS (first pass, reconciler
  down for long, another shard count): a full pass. It lists every labelled job updated since the region's oldest
  open run (of the shard) was recorded, less the overlap: every open run's job was created after its run, so each
  is in that list with its current state (one still missing is read). The orphan look then judges every labelled
  job in the region;
- Vertex refused the update_time filter (INVALID_ARGUMENT): a full pass by reads, every open run's job read with
  GetCustomJob as before, logged;
- the run's record changed since W less the overlap (`updated_at`): a job submitted since, whose record the last
  pass may not have seen, or a cancel asked for since, is read once (GetCustomJob);
- the job waits (QUEUED or PENDING) past LANDFALL_LONG_WAIT_SECONDS with no `long_wait` noted yet: read to note why.

W moves to this pass's start only for a region where everything was seen: a region whose list failed, or where a run
could not be reconciled, keeps its watermark (the next pass lists those changes again); a job that ended within the
grace left to the listener holds it at the job's end time, so the next pass lists it again if the listener missed
it. The overlap (LANDFALL_RECONCILE_OVERLAP_SECONDS) covers clock skew between Vertex and the reconciler, and jobs
updated while a pass runs.

Sharding (LANDFALL_RECONCILE_SHARDS = N, default 1): open runs are split by a hash of their id; each pass takes the
shard whose last pass is oldest, so each run is looked at every N passes, a pass writes and waits on 1/N of the runs,
and a full pass by reads reads 1/N of the jobs. Each shard keeps its own watermark.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from functions.errors import LandfallError, PermanentError
from functions.gcp.vertex import JobView, RateLimitedError, VertexJobs
from functions.records.long_waits import WAITING_JOB_STATES
from schemas.reconcile_watermark import ReconcileWatermark, watermark_id
from schemas.run_record import RunRecord
from schemas.times import format_timestamp, parse_timestamp_or_none

log = logging.getLogger("landfall.reconciler")


class Watermarks(Protocol):
    def get_many(self, watermark_ids: Iterable[str]) -> dict[str, ReconcileWatermark]: ...
    def put(self, watermark: ReconcileWatermark) -> None: ...


@dataclass(frozen=True)
class ChangeDeps:
    watermarks: Watermarks
    shards: int = 1
    """settings.reconcile_shards (LANDFALL_RECONCILE_SHARDS)."""
    overlap_seconds: int = 300
    """settings.reconcile_overlap_seconds (LANDFALL_RECONCILE_OVERLAP_SECONDS)."""
    full_after_seconds: int = 3600
    """settings.reconcile_full_after_seconds (LANDFALL_RECONCILE_FULL_AFTER_SECONDS)."""
    orphan_window_seconds: int = 3600
    """settings.orphan_window_seconds (LANDFALL_ORPHAN_WINDOW_SECONDS): jobs created this long before the watermark
    are still judged as orphans; older ones were judged by earlier passes."""


def shard_of(run_id: str, shards: int) -> int:
    """The shard (0 .. shards-1) a run belongs to: a stable hash of its id."""
    if shards <= 1:
        return 0
    return int(hashlib.sha256(run_id.encode()).hexdigest()[:8], 16) % shards


def pick_shard(deps: ChangeDeps) -> ReconcileWatermark:
    """The watermark of the shard whose last pass is oldest; the lowest shard that has none comes first (empty)."""
    ids = [watermark_id(k, deps.shards) for k in range(deps.shards)]
    stored = deps.watermarks.get_many(ids)
    missing = [k for k, i in enumerate(ids) if i not in stored]
    if missing:
        return ReconcileWatermark(shard=missing[0], shards=deps.shards, passed_at="", regions={})
    return min(stored.values(), key=lambda w: (w.passed_at, w.shard))


class Mode(StrEnum):
    """How one pass reads one region's jobs."""

    CHANGES = "changes"
    """Listed the jobs changed since the watermark (less the overlap) or created within the orphan window."""
    FULL_LIST = "full-list"
    """A full pass by list: every job updated since the region's oldest open run was recorded (less the overlap),
    which holds every open run's job in its current state."""
    FULL_GET = "full-get"
    """A full pass by reads: Vertex refused the update_time filter, so every open run's job is read."""
    NOT_LISTED = "not-listed"
    """The list failed: nothing is read in the region this pass."""


@dataclass
class RegionLook:
    """What one pass knows about one region's jobs."""

    mode: Mode
    since: datetime | None = None
    """The update_time the list started from (None when not listed)."""
    changed: dict[str, JobView] = field(default_factory=dict)
    """Jobs listed this pass, by name."""
    listed: list[JobView] | None = None
    """The list's answer (None: not listed), also what the orphan look judges."""
    seen_all: bool = True
    """False once something in the region was not seen this pass: its watermark stays."""
    hold: datetime | None = None
    """The watermark may not pass this (a job ended within the grace, left to the listener)."""
    rate_limited: bool = False

    @property
    def full(self) -> bool:
        return self.mode in (Mode.FULL_LIST, Mode.FULL_GET)

    def keep_at_most(self, moment: datetime) -> None:
        self.hold = moment if self.hold is None else min(self.hold, moment)


@dataclass
class PassLook:
    """The regions of one pass, and the reads it makes of open runs' jobs."""

    deps: ChangeDeps
    watermark: ReconcileWatermark
    start: datetime
    regions: dict[str, RegionLook] = field(default_factory=dict)
    oldest: dict[str, datetime] = field(default_factory=dict)
    """Per region, when the oldest of the shard's open runs with a job was recorded (a full pass lists from it)."""

    def shard_runs(self, runs: Iterable[RunRecord]) -> list[RunRecord]:
        """The open runs of this pass's shard (read once, so the regions' oldest runs are known before listing)."""
        mine = [r for r in runs if self.mine(r.run_id)]
        for run in mine:
            created = parse_timestamp_or_none(run.created_at)
            if run.vertex is not None and created is not None:
                region = run.vertex.region
                self.oldest[region] = min(created, self.oldest.get(region, created))
        return mine

    def mine(self, run_id: str) -> bool:
        """Whether the run belongs to this pass's shard."""
        return shard_of(run_id, self.deps.shards) == self.watermark.shard

    def look(self, region: str, vertex: VertexJobs) -> RegionLook:
        """List the region's changes (once per pass), or its full list when the watermark is missing or too old."""
        if region in self.regions:
            return self.regions[region]
        mark = parse_timestamp_or_none(self.watermark.regions.get(region, ""))
        full = mark is None or (self.start - mark).total_seconds() > self.deps.full_after_seconds
        if mark is None or full:
            why = "no watermark" if mark is None else f"watermark {format_timestamp(mark)} older than the limit"
            log.info("region %s, shard %s: full pass (%s)", region, self.watermark.watermark_id, why)
            oldest = self.oldest.get(region, self.start)
            since = created = oldest - timedelta(seconds=self.deps.overlap_seconds)
        else:
            since = mark - timedelta(seconds=self.deps.overlap_seconds)
            created = mark - timedelta(seconds=self.deps.orphan_window_seconds)
        try:
            jobs = vertex.list_changed(
                region, updated_since=format_timestamp(since), created_since=format_timestamp(created)
            )
        except PermanentError as exc:
            log.warning("region %s: Vertex refused the update_time filter, full pass by reads: %s", region, exc)
            look = self.regions[region] = RegionLook(Mode.FULL_GET)
            return look
        except LandfallError as exc:
            log.warning("region %s: changes not listed this pass: %s", region, exc)
            look = self.regions[region] = RegionLook(Mode.NOT_LISTED, since=since, seen_all=False)
            return look
        mode = Mode.FULL_LIST if full else Mode.CHANGES
        look = self.regions[region] = RegionLook(mode, since=since, changed={j.name: j for j in jobs}, listed=jobs)
        return look

    def read_job(self, run: RunRecord, vertex: VertexJobs, *, now: datetime, long_wait_seconds: int) -> JobView | None:
        """The run's job as this pass knows it: the listed view, a GetCustomJob, or None (not read: it did not
        change, or its region could not be listed this pass)."""
        ref = run.vertex
        if ref is None:
            return None
        look = self.look(ref.region, vertex)
        if look.mode == Mode.NOT_LISTED:
            return None  # nothing is known of this region this pass
        if ref.job_name in look.changed:
            return look.changed[ref.job_name]
        if look.mode == Mode.CHANGES and not (
            _changed_since(run, look.since) or _long_wait_due(run, now, long_wait_seconds)
        ):
            return None
        # FULL_GET; FULL_LIST missing the job (deleted, or a clock far off); a run changed since the watermark.
        if look.rate_limited:
            look.seen_all = False
            return None
        try:
            return vertex.get(ref.job_name)
        except RateLimitedError:
            look.rate_limited = True  # the rest of the region's reads wait for the next pass
            look.seen_all = False
            raise

    def jobs_for_orphans(self, region: str, vertex: VertexJobs) -> list[JobView] | None:
        """The jobs the orphan look judges in region: the list of changes and of jobs created within the orphan
        window, or on a full pass every labelled job; None when the region could not be listed."""
        look = self.look(region, vertex)
        if look.mode == Mode.NOT_LISTED:
            return None
        return vertex.list_labelled(region) if look.full else look.listed

    def failed(self, run: RunRecord) -> None:
        """A run of this region was not reconciled: the region's watermark stays."""
        if run.vertex is not None and run.vertex.region in self.regions:
            self.regions[run.vertex.region].seen_all = False

    def ended_within_grace(self, job: JobView) -> None:
        end = parse_timestamp_or_none(job.end_time)
        if end is not None and job.region in self.regions:
            self.regions[job.region].keep_at_most(end)

    def finish(self) -> ReconcileWatermark:
        """The shard's watermark after this pass: moved to its start where everything was seen."""
        regions = dict(self.watermark.regions)
        for region, look in self.regions.items():
            if look.seen_all:
                regions[region] = format_timestamp(min(self.start, look.hold) if look.hold else self.start)
        watermark = replace(self.watermark, passed_at=format_timestamp(self.start), regions=regions)
        self.deps.watermarks.put(watermark)
        return watermark


def _changed_since(run: RunRecord, since: datetime | None) -> bool:
    updated = parse_timestamp_or_none(run.updated_at)
    return since is None or updated is None or updated >= since


def _long_wait_due(run: RunRecord, now: datetime, threshold_seconds: int) -> bool:
    """A waiting job that has waited past the threshold with no note yet: read once to note why."""
    if run.vertex is None or run.vertex.state not in WAITING_JOB_STATES:
        return False
    if run.long_wait is not None and run.long_wait.job_name == run.vertex.job_name:
        return False
    since = parse_timestamp_or_none(run.timings.submitted_at or "") or parse_timestamp_or_none(run.updated_at)
    return since is None or (now - since).total_seconds() >= threshold_seconds


def start_pass(deps: ChangeDeps, now: datetime) -> PassLook:
    return PassLook(deps=deps, watermark=pick_shard(deps), start=now)


__all__ = ["ChangeDeps", "Mode", "PassLook", "RegionLook", "Watermarks", "pick_shard", "shard_of", "start_pass"]
