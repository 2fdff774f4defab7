"""The reconciler's other looks, against the fakes: why a job waits long (noted on the run once, closed
when it starts), orphan jobs (recorded once, cancelled once when configured) and dataset versions whose request was
published but names no run (published again once per grace period, one run in the end). Two passes at once, or
one after another, change nothing twice."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from deploy.routes import Route
from functions.dispatch.handler import attempt_policy, resubmit
from functions.errors import TransientError
from functions.gcp.vertex import RUN_LABEL
from functions.reconciler.handler import ReconcilerDeps, _reconcile
from functions.reconciler.orphans import OrphanDeps
from functions.reconciler.republish import RepublishDeps
from functions.records.long_waits import long_wait_closed, long_wait_noted
from landfall.commands.runs import describe
from schemas.orphan_record import OrphanKind, orphan_id_for, parse_orphan_record
from schemas.run_record import RunState, parse_run_record
from schemas.times import format_timestamp
from tests.fakes import ingest
from tests.fakes.orphans import FakeOrphans
from tests.fakes.vertex import timestamp
from tests.fakes.world import NOW, PLAN, World

LEASE = 120
LONG_WAIT = 900


def reconciler(
    w: World, *, orphans: OrphanDeps | None = None, republish: RepublishDeps | None = None
) -> ReconcilerDeps:
    deps = w.reconciler_deps()
    return replace(deps, lease_seconds=LEASE, long_wait_seconds=LONG_WAIT, orphans=orphans, republish=republish)


def submitted(created_ago: timedelta = timedelta(0)) -> tuple[World, str]:
    """A run SUBMITTED with its job PENDING, the job created `created_ago` before the clock's now."""
    w = World()
    assert w.deliver() == "submitted"
    name = w.job_name()
    w.vertex.jobs[name].create_time = timestamp(NOW - created_ago)
    return w, name


# Long waits ----------------------------------------------------------------------------------------------------


def test_a_job_pending_past_the_threshold_gets_its_reason_noted_once_and_closed_when_it_starts() -> None:
    w, name = submitted()
    deps = reconciler(w)
    w.clock.now = NOW + timedelta(seconds=LONG_WAIT - 1)
    assert _reconcile(deps) == "unchanged=1" and w.run().long_wait is None
    w.clock.now = NOW + timedelta(seconds=LONG_WAIT + 1)
    assert _reconcile(deps) == "long-wait=1"
    note = w.run().long_wait
    assert note is not None and (note.job_name, note.job_state, note.since, note.over_at) == (
        name,
        "JOB_STATE_PENDING",
        format_timestamp(NOW),
        None,
    )
    assert note.reason.startswith("pending provisioning") and PLAN.machine_type in note.reason
    assert PLAN.region in note.reason
    before = w.doc()
    w.clock.now += timedelta(minutes=5)
    assert _reconcile(deps) == "unchanged=1"  # the same wait: nothing written
    assert w.doc() == before
    shown = describe(w.run())
    assert f"waiting   {note.reason} (job JOB_STATE_PENDING since {note.since}" in shown
    # The job starts: the listener records RUNNING and closes the note (kept, with when the wait ended).
    start = w.clock.now + timedelta(minutes=1)
    w.vertex.set_state(name, "JOB_STATE_RUNNING", start=start)
    assert w.job_event(name.rsplit("/", 1)[-1]) == "recorded:RUNNING"
    run = w.run()
    assert run.long_wait == replace(note, over_at=format_timestamp(start))
    assert [h.state for h in run.history] == ["RECEIVED", "PLANNED", "SUBMITTING", "SUBMITTED", "RUNNING"]
    assert "waited    pending provisioning" in describe(run)
    assert _reconcile(deps) == "unchanged=1" and w.run() == run


def test_a_changed_wait_is_noted_again_and_a_running_run_whose_job_pends_is_noted_too() -> None:
    w, name = submitted(created_ago=timedelta(hours=1))
    deps = reconciler(w)
    assert _reconcile(deps) == "long-wait=1"
    w.vertex.set_state(name, "JOB_STATE_QUEUED")
    w.clock.now += timedelta(minutes=1)
    assert _reconcile(deps) == "long-wait=1"
    note = w.run().long_wait
    assert note is not None and note.job_state == "JOB_STATE_QUEUED" and note.reason.startswith("queued")
    assert note.noted_at == format_timestamp(w.clock.now)
    # RUNNING on the run while Vertex reports the job PENDING again (a worker being replaced): noted as well.
    w.runs.transition(w.run().run_id, RunState.RUNNING, now=w.clock.now)
    w.vertex.set_state(name, "JOB_STATE_PENDING")
    assert _reconcile(deps) == "long-wait=1"
    note = w.run().long_wait
    assert note is not None and note.job_state == "JOB_STATE_PENDING"


def test_the_long_wait_rules_leave_other_jobs_and_ended_runs_alone() -> None:
    w, name = submitted(created_ago=timedelta(hours=1))
    job = w.vertex.get(name)
    run = w.run()
    other = replace(job, name=name + "0")
    assert long_wait_noted(other, now=NOW, threshold_seconds=LONG_WAIT)(run) == (None, "not-waiting")
    assert long_wait_noted(replace(job, state="JOB_STATE_RUNNING"), now=NOW, threshold_seconds=LONG_WAIT)(run) == (
        None,
        "not-waiting",
    )
    new, said = long_wait_noted(job, now=NOW, threshold_seconds=LONG_WAIT)(run)
    assert said == "noted" and new is not None and new.history == run.history
    # A note about an earlier attempt's job is closed when another job is current.
    closed = long_wait_closed(new, replace(job, name=name + "0", state="JOB_STATE_PENDING"), NOW)
    assert closed.long_wait is not None and closed.long_wait.over_at == format_timestamp(NOW)


def test_a_record_without_long_wait_parses_and_one_with_it_round_trips() -> None:
    w, _ = submitted(created_ago=timedelta(hours=1))
    plain = w.doc()
    assert "long_wait" not in plain and parse_run_record(copy.deepcopy(plain)).long_wait is None
    _reconcile(reconciler(w))
    doc = w.doc()
    assert set(doc["long_wait"]) == {"job_name", "job_state", "reason", "since", "noted_at"}
    assert parse_run_record(copy.deepcopy(doc)).to_document() == doc


# Orphans -------------------------------------------------------------------------------------------------------


def labelled_job(w: World, run_id: str, *, region: str = "us-central1", age: timedelta = timedelta(minutes=5)) -> str:
    job = w.vertex.create(region, {"display_name": f"landfall-{run_id}", "labels": {RUN_LABEL: run_id}})
    w.vertex.jobs[job.name].create_time = timestamp(w.clock.now - age)
    return job.name


def orphan_deps(w: World, *, cancel: bool = False, store: FakeOrphans | None = None) -> OrphanDeps:
    return OrphanDeps(
        store=store or FakeOrphans(),
        runs=w.runs.get_many,
        regions=("us-central1", "asia-east1"),
        cancel=cancel,
        grace_seconds=LEASE,
    )


def test_jobs_no_run_accounts_for_are_recorded_once_and_young_or_known_jobs_are_not() -> None:
    w, current = submitted()
    ghost = labelled_job(w, "run-ghost", region="asia-east1")
    duplicate = labelled_job(w, w.run().run_id)
    labelled_job(w, "run-ghost-young", age=timedelta(seconds=LEASE - 5))
    deps = orphan_deps(w)
    assert _reconcile(reconciler(w, orphans=deps)) == "orphan=2 unchanged=1"
    store = deps.store
    assert isinstance(store, FakeOrphans)
    assert set(store.docs) == {orphan_id_for(ghost), orphan_id_for(duplicate)}
    lost = store.get(orphan_id_for(ghost))
    assert lost is not None and (lost.kind, lost.run_id, lost.region, lost.cancel) == (
        OrphanKind.NO_RUN,
        "run-ghost",
        "asia-east1",
        None,
    )
    extra = store.get(orphan_id_for(duplicate))
    assert extra is not None and (extra.kind, extra.run_job_name) == (OrphanKind.OTHER_JOB, current)
    assert f"records job {current}" in extra.reason
    before = copy.deepcopy(store.docs)
    assert _reconcile(reconciler(w, orphans=deps)) == "unchanged=1"
    assert store.docs == before and w.vertex.cancelled == []
    assert (
        parse_orphan_record(copy.deepcopy(store.docs[orphan_id_for(ghost)])).to_document()
        == before[orphan_id_for(ghost)]
    )


def test_an_earlier_attempts_job_and_a_run_being_submitted_are_not_orphans() -> None:
    w, first = submitted(created_ago=timedelta(minutes=10))
    stockout = "Resources are insufficient in region: us-central1. Try a different region."
    w.vertex.set_state(first, "JOB_STATE_FAILED", start=NOW, end=NOW, error=(8, stockout))
    w.listener_deps = replace(
        w.listener_deps,
        resubmit=lambda run_id: resubmit(run_id, w.dispatch_deps),
        policy=attempt_policy(w.dispatch_deps.settings),
    )
    assert w.job_event(first.rsplit("/", 1)[-1]) == "resubmitted:submitted"
    # A job labelled for a run that is still being submitted: the dispatcher adopts it, it is no orphan.
    w.runs.put(replace(w.run(), run_id="run-submitting", state=RunState.SUBMITTING, vertex=None))
    labelled_job(w, "run-submitting")
    store = FakeOrphans()
    w.clock.now += timedelta(minutes=10)
    _reconcile(reconciler(w, orphans=orphan_deps(w, store=store)))
    assert store.docs == {}


def test_with_cancel_configured_a_live_orphan_is_cancelled_once_even_by_two_passes_at_once() -> None:
    w, _ = submitted()
    ghost = labelled_job(w, "run-ghost")
    ended = labelled_job(w, "run-gone")
    w.vertex.set_state(ended, "JOB_STATE_SUCCEEDED", end=NOW)
    store = FakeOrphans()
    deps = orphan_deps(w, cancel=True, store=store)
    inner: list[str] = []
    cancel = w.vertex.cancel

    def cancel_during_another_pass(name: str) -> bool:
        if not inner:  # the second pass runs while the first is asking Vertex
            inner.append(_reconcile(reconciler(w, orphans=deps)))
        return cancel(name)

    w.vertex.cancel = cancel_during_another_pass  # type: ignore[method-assign]
    # The inner pass finds the cancel claimed and asks nothing; each orphan is recorded by one of the two passes.
    assert _reconcile(reconciler(w, orphans=deps)) == "orphan=1 orphan-cancelled=1 unchanged=1"
    assert inner == ["orphan=1 unchanged=1"]
    assert w.vertex.cancelled == [ghost] and len(store.docs) == 2
    record, done = store.get(orphan_id_for(ghost)), store.get(orphan_id_for(ended))
    assert record is not None and record.cancel is not None and record.cancel.outcome == "asked"
    assert done is not None and done.cancel is None
    assert _reconcile(reconciler(w, orphans=deps)) == "unchanged=1" and w.vertex.cancelled == [ghost]


def test_an_orphan_recorded_before_cancelling_was_configured_is_cancelled_later_and_an_error_is_tried_again() -> None:
    w, _ = submitted()
    ghost = labelled_job(w, "run-ghost")
    store = FakeOrphans()
    assert _reconcile(reconciler(w, orphans=orphan_deps(w, store=store))) == "orphan=1 unchanged=1"
    cancel = w.vertex.cancel

    def unavailable(name: str) -> bool:
        raise TransientError("CancelCustomJob: Vertex AI unavailable; will retry")

    w.vertex.cancel = unavailable  # type: ignore[method-assign]
    deps = orphan_deps(w, cancel=True, store=store)
    assert _reconcile(reconciler(w, orphans=deps)) == "orphan-error=1 unchanged=1"
    record = store.get(orphan_id_for(ghost))
    assert record is not None and record.cancel is not None and record.cancel.outcome.startswith("error: ")
    w.vertex.cancel = cancel  # type: ignore[method-assign]
    assert _reconcile(reconciler(w, orphans=deps)) == "orphan-cancelled=1 unchanged=1"
    assert w.vertex.cancelled == [ghost]


# Republishing unanswered dataset versions ----------------------------------------------------------------------

# Named as the shipped route that owns datasets/: the dispatcher takes ingest's `landfall-route` label only when it
# names the route that owns the data.
ROUTE = Route(
    name="default-tabular", bucket="*", prefix="datasets/", task="tabular-classification", model_preset="mlp-small"
)
GRACE = 600


def published_version(w: World) -> tuple[ingest.World, str]:
    """A dataset version whose request ingest published (the message then lost); returns its version id."""
    landing = ingest.World((ROUTE,))
    landing.clock.now = w.clock.now
    landing.upload("datasets/a/part-0.csv", b"x,label\n1,0\n")
    outcome = landing.upload("datasets/a/_SUCCESS", b"")
    assert outcome.startswith("published:") and len(landing.published) == 1
    version_id = outcome.split(":", 1)[1]
    assert landing.datasets.versions[version_id]["answered"] is False
    return landing, version_id


def republish_deps(w: World, landing: ingest.World, publish: Callable[[bytes], str] | None = None) -> RepublishDeps:
    def append(data: bytes) -> str:
        landing.published.append(data)
        return f"m-{len(landing.published)}"

    return RepublishDeps(
        versions=landing.datasets, runs=w.runs.get_many, publish=publish or append, grace_seconds=GRACE
    )


def test_a_lost_request_is_published_again_after_the_grace_once_and_makes_one_run() -> None:
    w = World()
    landing, version_id = published_version(w)
    deps = reconciler(w, republish=republish_deps(w, landing))
    w.clock.now = NOW + timedelta(seconds=GRACE - 1)
    assert _reconcile(deps) == "no open runs" and len(landing.published) == 1
    w.clock.now = NOW + timedelta(seconds=GRACE + 1)
    assert _reconcile(deps) == "republished=1"
    assert _reconcile(deps) == "no open runs"  # claimed: the next one is due a grace later
    assert landing.published[1] == landing.published[0]  # the kept request, byte for byte
    version = landing.datasets.versions[version_id]
    assert (version["republished_count"], version["last_republished_at"], version["last_republished_message_id"]) == (
        1,
        format_timestamp(w.clock.now),
        "m-2",
    )
    # The republished message and then the lost one, late after all: one run, one job.
    assert w.deliver(landing.published[1], message_id="m-2") == "submitted"
    assert w.deliver(landing.published[0], message_id="m-1") == "duplicate:SUBMITTED"
    assert len(w.runs.docs) == 1 and len(w.vertex.jobs) == 1
    run_id = next(iter(w.runs.docs))
    assert run_id == version_id
    w.clock.now += timedelta(seconds=GRACE + 1)
    assert _reconcile(deps) == "answered=1 unchanged=1"
    assert landing.datasets.versions[version_id]["answered"] is True
    w.clock.now += timedelta(days=1)
    assert "republished" not in _reconcile(deps) and len(landing.published) == 2


def test_two_passes_at_once_republish_once() -> None:
    w = World()
    landing, version_id = published_version(w)
    inner: list[str] = []
    deps: list[ReconcilerDeps] = []

    def publish_during_another_pass(data: bytes) -> str:
        if not inner:
            inner.append(_reconcile(deps[0]))
        landing.published.append(data)
        return "m-2"

    deps.append(reconciler(w, republish=republish_deps(w, landing, publish_during_another_pass)))
    w.clock.now = NOW + timedelta(seconds=GRACE + 1)
    assert _reconcile(deps[0]) == "republished=1"
    assert inner == ["no open runs"] and len(landing.published) == 2
    assert landing.datasets.versions[version_id]["republished_count"] == 1


def test_a_failed_republish_counts_nothing_and_is_tried_again_a_grace_later() -> None:
    w = World()
    landing, version_id = published_version(w)

    def down(data: bytes) -> str:
        raise TransientError("Pub/Sub training requests failed (ServiceUnavailable); will retry")

    w.clock.now = NOW + timedelta(seconds=GRACE + 1)
    assert _reconcile(reconciler(w, republish=republish_deps(w, landing, down))) == "republish-error=1"
    assert "republished_count" not in landing.datasets.versions[version_id]
    deps = reconciler(w, republish=republish_deps(w, landing))
    assert _reconcile(deps) == "no open runs"
    w.clock.now += timedelta(seconds=GRACE)
    assert _reconcile(deps) == "republished=1" and landing.datasets.versions[version_id]["republished_count"] == 1


@pytest.mark.parametrize("status", ["REFUSED", "DUPLICATE", "CLAIMED"])
def test_only_published_versions_are_republished(status: str) -> None:
    w = World()
    landing, version_id = published_version(w)
    landing.datasets.versions[version_id]["status"] = status
    w.clock.now = NOW + timedelta(days=1)
    assert _reconcile(reconciler(w, republish=republish_deps(w, landing))) == "no open runs"
    assert len(landing.published) == 1


# The orphan record's contract ----------------------------------------------------------------------------------


def test_the_golden_orphan_record_round_trips_and_bad_fields_are_named() -> None:
    import json
    from pathlib import Path

    from schemas.errors import SchemaError

    golden = json.loads((Path(__file__).resolve().parents[2] / "schemas/examples/orphan_record.json").read_text())
    record = parse_orphan_record(copy.deepcopy(golden))
    assert record.to_document() == golden and record.orphan_id == "us-central1-7000000000000000002"
    assert record.kind == OrphanKind.OTHER_JOB and record.cancel is not None and record.cancel.outcome == "asked"
    with pytest.raises(SchemaError, match=r"orphan\.kind"):
        parse_orphan_record({**golden, "kind": "lost"})
    with pytest.raises(SchemaError, match=r"orphan\.job_name"):
        orphan_id_for("customJobs/7")


# Settings ------------------------------------------------------------------------------------------------------


def test_the_reconciler_settings_come_from_the_environment_and_bad_values_are_named() -> None:
    from functions.settings import SettingsError, settings_from_env

    base = {"GOOGLE_CLOUD_PROJECT": "p"}
    plain = settings_from_env(base)
    assert (
        plain.long_wait_seconds,
        plain.republish_grace_seconds,
        plain.cancel_orphans,
        plain.orphans_collection,
        plain.job_regions,
    ) == (900, 600, False, "orphans", ("us-central1",))
    custom = settings_from_env(
        {
            **base,
            "LANDFALL_LONG_WAIT_SECONDS": "60",
            "LANDFALL_REPUBLISH_GRACE_SECONDS": "30",
            "LANDFALL_CANCEL_ORPHANS": "True",
            "LANDFALL_ORPHANS_COLLECTION": "o2",
            "LANDFALL_ARTIFACT_BUCKETS": "europe-west4=b1,us-central1=b2",
        }
    )
    assert (
        custom.long_wait_seconds,
        custom.republish_grace_seconds,
        custom.cancel_orphans,
        custom.orphans_collection,
        custom.job_regions,
    ) == (60, 30, True, "o2", ("us-central1", "europe-west4"))
    assert settings_from_env({**base, "LANDFALL_CANCEL_ORPHANS": "no"}).cancel_orphans is False
    with pytest.raises(SettingsError, match="LANDFALL_REPUBLISH_GRACE_SECONDS must be a whole number"):
        settings_from_env({**base, "LANDFALL_REPUBLISH_GRACE_SECONDS": "soon"})


# Two passes at once --------------------------------------------------------------------------------------------


def test_two_passes_running_together_note_once_record_once_cancel_once_and_republish_once() -> None:
    from concurrent.futures import ThreadPoolExecutor

    w, name = submitted(created_ago=timedelta(hours=1))
    ghost = labelled_job(w, "run-ghost")
    landing, version_id = published_version(w)
    w.clock.now = NOW + timedelta(hours=2)
    orphans = FakeOrphans()
    deps = reconciler(w, orphans=orphan_deps(w, cancel=True, store=orphans), republish=republish_deps(w, landing))
    for _ in range(3):
        with ThreadPoolExecutor(2) as pool:
            summaries = list(pool.map(lambda _: _reconcile(deps), range(2)))
        assert all("error" not in s for s in summaries), summaries
    note = w.run().long_wait
    assert note is not None and note.job_name == name
    assert [h.state for h in w.run().history].count(RunState.SUBMITTED) == 1
    assert list(orphans.docs) == [orphan_id_for(ghost)] and w.vertex.cancelled == [ghost]
    assert len(landing.published) == 2 and landing.datasets.versions[version_id]["republished_count"] == 1


def test_a_store_that_fails_a_look_is_counted_and_the_pass_goes_on() -> None:
    w, _ = submitted()
    landing, _ = published_version(w)

    def unavailable(*, page_size: int = 200) -> Any:
        raise TransientError("Firestore unavailable; will retry")
        yield  # a generator, as the store's

    landing.datasets.unanswered_versions = unavailable  # type: ignore[method-assign]
    labelled_job(w, "run-ghost")
    deps = reconciler(w, orphans=orphan_deps(w), republish=republish_deps(w, landing))
    assert _reconcile(deps) == "orphan=1 republish-error=1 unchanged=1"
