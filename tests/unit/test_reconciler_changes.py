"""Against the fakes: a reconcile pass reads from Vertex what changed since the last pass (one
ListCustomJobs per region), not every open run's job, so its calls do not grow with the open runs; the safe full
pass where it is needed (no watermark, a watermark too old, the update_time filter refused), a run whose record
changed since the watermark read once, a job ended within the grace listed again, and shards."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import timedelta

import pytest

from functions.gcp.vertex import RUN_LABEL
from functions.reconciler.changes import ChangeDeps, shard_of
from functions.reconciler.handler import OPEN_STATES, ReconcilerDeps, _reconcile
from functions.reconciler.orphans import OrphanDeps
from functions.records.attempts import AttemptPolicy
from schemas.reconcile_watermark import parse_reconcile_watermark, watermark_id
from schemas.run_record import RunState, VertexJobRef, new_run
from schemas.times import format_timestamp
from tests.fakes.orphans import FakeOrphans
from tests.fakes.watermarks import FakeWatermarks
from tests.fakes.world import NOW, World

REGION = "us-central1"
SEEDED = NOW - timedelta(hours=2)
"""When the open runs were submitted and their jobs last changed."""


def seeded(n: int) -> World:
    """A world with n RUNNING runs and their RUNNING jobs, all last changed at SEEDED; Vertex on the world clock."""
    w = World()
    w.vertex.now = w.clock
    w.clock.now = SEEDED
    for i in range(n):
        run_id = f"run-{i:05d}"
        job = w.vertex.create(REGION, {"display_name": f"landfall-{run_id}", "labels": {RUN_LABEL: run_id}})
        w.vertex.set_state(job.name, "JOB_STATE_RUNNING", start=SEEDED)
        ref = VertexJobRef(job.name, job.job_id, REGION, job.display_name, "JOB_STATE_RUNNING")
        w.runs.put(replace(new_run(run_id, {"task": "t"}, now=SEEDED), state=RunState.RUNNING, vertex=ref))
    w.vertex.calls.clear()
    return w


def job_of(w: World, run_id: str) -> str:
    run = w.runs.get(run_id)
    assert run is not None and run.vertex is not None
    return run.vertex.job_name


def deps(w: World, marks: FakeWatermarks, **changes: int) -> ReconcilerDeps:
    return ReconcilerDeps(
        open_runs=lambda: w.runs.in_states(OPEN_STATES),
        vertex=w.vertex,  # type: ignore[arg-type]
        listener=w.listener_deps,
        resubmit=lambda run_id: "unused",
        policy=AttemptPolicy(),
        lease_seconds=120,
        now=w.clock,
        orphans=OrphanDeps(
            store=FakeOrphans(), runs=w.runs.get_many, regions=(REGION,), cancel=False, grace_seconds=120
        ),
        changes=ChangeDeps(watermarks=marks, **changes),
    )


def one_pass(w: World, d: ReconcilerDeps, at: timedelta) -> tuple[str, Counter[str]]:
    """A pass at NOW + at; its summary and the Vertex calls it made, by method."""
    w.clock.now = NOW + at
    w.vertex.calls.clear()
    said = _reconcile(d)
    return said, Counter(w.vertex.calls)


@pytest.mark.parametrize("n", [10, 1000])
def test_a_steady_pass_makes_one_list_whatever_the_number_of_open_runs(n: int) -> None:
    w, marks = seeded(n), FakeWatermarks()
    d = deps(w, marks)
    first, full = one_pass(w, d, timedelta(0))
    # No watermark yet: a full pass, by list (every job changed since the oldest open run, a page per 100), and the
    # orphan look over every labelled job (as many pages again here): no job read one by one.
    assert "vertex-full=1" in first and full == Counter({"ListCustomJobs": 2 * -(-n // 100)}), (first, full)
    second, steady = one_pass(w, d, timedelta(minutes=1))
    assert steady == Counter({"ListCustomJobs": 1}), steady  # one list, no job read, for 10 as for 1,000 runs
    assert second == f"unchanged={n}", second
    mark = parse_reconcile_watermark(marks.docs[watermark_id(0, 1)])
    assert mark.regions == {REGION: format_timestamp(NOW + timedelta(minutes=1))}


def test_a_full_pass_records_a_job_that_changed_long_ago_from_its_list() -> None:
    w, marks = seeded(30), FakeWatermarks()
    w.clock.now = SEEDED + timedelta(minutes=10)
    w.vertex.set_state(job_of(w, "run-00011"), "JOB_STATE_SUCCEEDED", end=w.clock.now)
    said, calls = one_pass(w, deps(w, marks), timedelta(0))
    assert "recorded:SUCCEEDED=1" in said and calls["GetCustomJob"] == 0, (said, calls)


def test_calls_per_steady_pass_are_the_same_for_10_and_1000_open_runs() -> None:
    calls = []
    for n in (10, 1000):
        w, marks = seeded(n), FakeWatermarks()
        d = deps(w, marks)
        one_pass(w, d, timedelta(0))
        calls.append(one_pass(w, d, timedelta(minutes=1))[1])
    assert calls[0] == calls[1] == Counter({"ListCustomJobs": 1})


def test_a_job_changed_since_the_last_pass_is_found_in_the_list_and_recorded_without_a_read() -> None:
    w, marks = seeded(50), FakeWatermarks()
    d = deps(w, marks)
    one_pass(w, d, timedelta(0))
    w.clock.now = NOW + timedelta(seconds=30)
    name = job_of(w, "run-00007")
    w.vertex.set_state(name, "JOB_STATE_FAILED", end=w.clock.now, error=(3, "The replica workerpool0-0 exited 1."))
    said, calls = one_pass(w, d, timedelta(minutes=1))
    assert calls == Counter({"ListCustomJobs": 1}) and "recorded:FAILED=1" in said, (said, calls)
    run = w.runs.get("run-00007")
    assert run is not None and run.state == RunState.FAILED


def test_a_run_recorded_after_its_job_changed_before_the_watermark_is_read_once() -> None:
    """The slow dispatcher: the job failed before the last pass's overlap, its run was written SUBMITTED after."""
    w, marks = seeded(3), FakeWatermarks()
    d = deps(w, marks, overlap_seconds=10, orphan_window_seconds=10)
    one_pass(w, d, timedelta(0))
    w.clock.now = NOW + timedelta(seconds=10)
    job = w.vertex.create(REGION, {"display_name": "landfall-run-late", "labels": {RUN_LABEL: "run-late"}})
    w.clock.now = NOW + timedelta(seconds=15)
    w.vertex.set_state(job.name, "JOB_STATE_FAILED", end=w.clock.now, error=(3, "exited 1"))
    one_pass(w, d, timedelta(seconds=30))  # lists the job: no run names it yet (younger than the orphan grace)
    w.clock.now = NOW + timedelta(seconds=60)
    ref = VertexJobRef(job.name, job.job_id, REGION, job.display_name, "JOB_STATE_PENDING")
    w.runs.put(replace(new_run("run-late", {"task": "t"}, now=w.clock.now), state=RunState.SUBMITTED, vertex=ref))
    said, calls = one_pass(w, d, timedelta(seconds=90))  # lists from NOW+20 s: the job changed at NOW+15 s
    assert calls == Counter({"ListCustomJobs": 1, "GetCustomJob": 1}) and "recorded:FAILED=1" in said, (said, calls)
    assert one_pass(w, d, timedelta(seconds=120))[1] == Counter({"ListCustomJobs": 1})


def test_a_missing_or_too_old_watermark_or_a_refused_filter_gives_a_full_pass() -> None:
    w, marks = seeded(20), FakeWatermarks()
    d = deps(w, marks, full_after_seconds=600)
    said, calls = one_pass(w, d, timedelta(0))  # missing
    assert "vertex-full=1" in said and calls == Counter({"ListCustomJobs": 2}), (said, calls)
    assert one_pass(w, d, timedelta(minutes=5))[1] == Counter({"ListCustomJobs": 1})
    said, calls = one_pass(w, d, timedelta(minutes=20))  # 15 min since the last pass: older than 600 s
    assert "vertex-full=1" in said and calls == Counter({"ListCustomJobs": 2}), (said, calls)
    w.vertex.refuse_update_time = True  # a Vertex that does not take the filter: every job read, as before
    said, calls = one_pass(w, d, timedelta(minutes=21))
    assert calls == Counter({"GetCustomJob": 20, "ListCustomJobs": 1}) and "vertex-full=1" in said, (said, calls)


def test_a_job_ended_within_the_grace_is_listed_again_until_the_listener_or_the_reconciler_records_it() -> None:
    w, marks = seeded(5), FakeWatermarks()
    d = replace(deps(w, marks, overlap_seconds=5), grace_seconds=60)
    one_pass(w, d, timedelta(0))
    w.clock.now = NOW + timedelta(seconds=50)
    name = job_of(w, "run-00002")
    w.vertex.set_state(name, "JOB_STATE_SUCCEEDED", end=w.clock.now)
    assert "recorded" not in one_pass(w, d, timedelta(seconds=70))[0]  # ended 20 s ago: left to the listener
    # The listener never came. The next pass lists from the job's end (held), past the grace it is recorded.
    said, calls = one_pass(w, d, timedelta(seconds=200))
    assert "recorded:SUCCEEDED=1" in said and calls == Counter({"ListCustomJobs": 1}), (said, calls)


def test_a_job_pending_past_the_long_wait_threshold_is_read_once_to_note_why() -> None:
    w, marks = seeded(4), FakeWatermarks()
    w.clock.now = NOW - timedelta(seconds=600)
    job = w.vertex.create(REGION, {"display_name": "landfall-run-wait", "labels": {RUN_LABEL: "run-wait"}})
    ref = VertexJobRef(job.name, job.job_id, REGION, job.display_name, "JOB_STATE_PENDING")
    w.runs.put(replace(new_run("run-wait", {"task": "t"}, now=w.clock.now), state=RunState.SUBMITTED, vertex=ref))
    d = deps(w, marks, orphan_window_seconds=300)  # long_wait_seconds 900: the job has waited 600 s at NOW
    assert "long-wait" not in one_pass(w, d, timedelta(0))[0]
    assert one_pass(w, d, timedelta(seconds=60))[1] == Counter({"ListCustomJobs": 1})  # not due: not read
    said, calls = one_pass(w, d, timedelta(seconds=400))  # waited 1,000 s, unchanged on Vertex
    assert "long-wait=1" in said and calls == Counter({"ListCustomJobs": 1, "GetCustomJob": 1}), (said, calls)
    # Its record changed (the note): passes whose overlap reaches back to the note read it again, then none.
    assert one_pass(w, d, timedelta(seconds=600))[1]["GetCustomJob"] == 1
    assert one_pass(w, d, timedelta(seconds=1000))[1]["GetCustomJob"] == 1  # its watermark (600 s) less 300 s
    assert one_pass(w, d, timedelta(seconds=1400))[1] == Counter({"ListCustomJobs": 1})


def test_shards_split_the_open_runs_and_each_pass_takes_the_oldest_shard() -> None:
    w, marks = seeded(200), FakeWatermarks()
    w.vertex.refuse_update_time = True  # full passes by reads show which runs each pass takes
    d = deps(w, marks, shards=4)
    sizes = Counter(shard_of(f"run-{i:05d}", 4) for i in range(200))
    reads = []
    for k in range(4):
        said, calls = one_pass(w, d, timedelta(minutes=k))
        reads.append(calls["GetCustomJob"])
        assert f"shard-{k}-of-4=1" in said, said
    assert reads == [sizes[k] for k in range(4)] and sum(reads) == 200  # each pass read its own shard's runs
    w.vertex.refuse_update_time = False
    for k in range(4):
        said, calls = one_pass(w, d, timedelta(minutes=4 + k))  # each shard now lists its changes: no read
        assert f"shard-{k}-of-4=1" in said and calls["GetCustomJob"] == 0, (said, calls)
    said, calls = one_pass(w, d, timedelta(minutes=8))
    assert "shard-0-of-4=1" in said and calls == Counter({"ListCustomJobs": 1}), (said, calls)
    assert sorted(marks.docs) == [watermark_id(k, 4) for k in range(4)]


def test_the_golden_watermark_round_trips_and_bad_fields_are_named() -> None:
    import copy
    import json
    from pathlib import Path

    from schemas.errors import SchemaError
    from schemas.reconcile_watermark import parse_reconcile_watermark

    golden = json.loads((Path(__file__).resolve().parents[2] / "schemas/examples/reconcile_watermark.json").read_text())
    assert parse_reconcile_watermark(copy.deepcopy(golden)).to_document() == golden
    for bad, field in (
        ({"shard": 1}, "reconcile_watermark.shard"),
        ({"regions": {"us-central1": "yesterday"}}, "reconcile_watermark.regions.us-central1"),
        ({"passed_at": 5}, "reconcile_watermark.passed_at"),
    ):
        with pytest.raises(SchemaError) as caught:
            parse_reconcile_watermark({**golden, **bad})
        assert caught.value.field == field, (bad, caught.value)


def test_the_reconcile_settings_are_read_and_a_window_inside_the_lease_is_refused() -> None:
    from functions.settings import SettingsError, settings_from_env

    base = {"GOOGLE_CLOUD_PROJECT": "landfall-local"}
    default = settings_from_env(base)
    defaults = (default.reconcile_shards, default.reconcile_overlap_seconds, default.orphan_window_seconds)
    assert defaults == (1, 300, 3600)
    assert default.reconciler_collection == "reconciler"
    set_ = settings_from_env({**base, "LANDFALL_RECONCILE_SHARDS": "8", "LANDFALL_ORPHAN_WINDOW_SECONDS": "900"})
    assert (set_.reconcile_shards, set_.orphan_window_seconds) == (8, 900)
    with pytest.raises(SettingsError, match=r"LANDFALL_ORPHAN_WINDOW_SECONDS .* above LANDFALL_SUBMISSION_LEASE"):
        settings_from_env({**base, "LANDFALL_ORPHAN_WINDOW_SECONDS": "60"})
    with pytest.raises(SettingsError, match="LANDFALL_RECONCILE_SHARDS must be a whole number from 1 to 64"):
        settings_from_env({**base, "LANDFALL_RECONCILE_SHARDS": "0"})
