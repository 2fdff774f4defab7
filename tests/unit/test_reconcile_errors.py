"""A reconcile pass handles each run on its own, against the fakes: whatever one run raises (a bug as well as a store
error, or a document the reader refuses) is logged and counted, the run is marked (`reconcile_errors`), and the pass
reconciles the other runs, does its other looks and succeeds; the mark is removed once the run reconciles again,
and `landfall run` and the dashboard show it."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from functions.gcp.vertex import RUN_LABEL, JobView
from functions.reconciler.changes import ChangeDeps
from functions.reconciler.handler import _reconcile
from landfall.commands.runs import describe
from landfall.ui.views import reconcile_note
from schemas.reconcile_watermark import watermark_id
from schemas.run_record import RunRecord, RunState, VertexJobRef, new_run, parse_run_record
from schemas.times import format_timestamp
from tests.fakes.watermarks import FakeWatermarks
from tests.fakes.world import NOW, World

REGION = "us-central1"


def running(w: World, run_id: str) -> str:
    """A RUNNING run with its RUNNING job; the job's name."""
    job = w.vertex.create(REGION, {"display_name": f"landfall-{run_id}", "labels": {RUN_LABEL: run_id}})
    w.vertex.set_state(job.name, "JOB_STATE_RUNNING", start=NOW)
    ref = VertexJobRef(job.name, job.job_id, REGION, job.display_name, "JOB_STATE_RUNNING")
    w.runs.put(replace(new_run(run_id, {"task": "t"}, now=NOW), state=RunState.RUNNING, vertex=ref))
    return job.name


def test_a_run_that_raises_is_marked_and_the_other_run_is_reconciled_then_the_mark_goes_when_it_reconciles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    w = World()
    w.vertex.now = w.clock
    bad, good = running(w, "run-a-bad"), running(w, "run-b-good")
    w.vertex.set_state(good, "JOB_STATE_SUCCEEDED", end=NOW)
    read = w.vertex.get
    broken = {bad}

    def get(name: str) -> JobView:
        if name in broken:
            raise KeyError("a bug in reading this job")  # not a LandfallError: the pass used to end here
        return read(name)

    monkeypatch.setattr(w.vertex, "get", get)
    deps = w.reconciler_deps()
    w.clock.now = NOW + timedelta(minutes=1)
    assert _reconcile(deps) == "error=1 recorded:SUCCEEDED=1"
    assert w.run("run-b-good").state == RunState.SUCCEEDED
    first = w.run("run-a-bad").reconcile_errors
    assert first is not None and first.count == 1 and first.last_error == "KeyError: 'a bug in reading this job'"
    assert first.first_seen == first.last_seen == format_timestamp(NOW + timedelta(minutes=1))

    w.clock.now = NOW + timedelta(minutes=2)
    assert _reconcile(deps) == "error=1"
    marked = w.run("run-a-bad")
    assert marked.reconcile_errors is not None and marked.state == RunState.RUNNING
    assert (marked.reconcile_errors.count, marked.reconcile_errors.first_seen, marked.reconcile_errors.last_seen) == (
        2,
        first.first_seen,
        format_timestamp(NOW + timedelta(minutes=2)),
    )
    said = (
        f"reconcile failed on 2 passes in a row ({first.first_seen} to {marked.reconcile_errors.last_seen}); last: Key"
    )
    assert said in describe(marked)
    assert reconcile_note(marked).startswith("failed on 2 passes in a row")

    broken.clear()
    assert _reconcile(deps) == "unchanged=1"
    assert "reconcile_errors" not in w.doc("run-a-bad") and "reconcile" not in describe(w.run("run-a-bad"))


def test_a_document_the_reader_refuses_is_marked_without_being_read_and_the_pass_goes_on() -> None:
    w = World()
    w.vertex.now = w.clock
    good = running(w, "run-b-good")
    running(w, "run-a-unreadable")
    w.runs.docs["run-a-unreadable"]["cost"] = {"estimated_usd": "a lot"}  # a value no reader takes
    w.vertex.set_state(good, "JOB_STATE_SUCCEEDED", end=NOW)
    marks = FakeWatermarks()
    deps = replace(w.reconciler_deps(), changes=ChangeDeps(watermarks=marks))
    before = w.doc("run-a-unreadable")
    w.clock.now = NOW + timedelta(minutes=1)
    said = _reconcile(deps)
    assert said == "error=1 recorded:SUCCEEDED=1 vertex-full=1", said
    assert w.run("run-b-good").state == RunState.SUCCEEDED
    assert watermark_id(0, 1) in marks.docs  # the pass went on to the end
    after = w.doc("run-a-unreadable")
    mark = after.pop("reconcile_errors")
    assert after == before, "only the mark is written"
    assert mark["count"] == 1 and "run.cost.estimated_usd" in mark["last_error"], mark
    with pytest.raises(ValueError, match="estimated_usd"):
        parse_run_record(w.doc("run-a-unreadable"))
    assert _reconcile(deps).startswith("error=1") and w.doc("run-a-unreadable")["reconcile_errors"]["count"] == 2


def test_the_other_looks_fail_alone_whatever_they_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    w = World()
    running(w, "run-open")
    for run_id in ("run-ended-1", "run-ended-2"):
        w.runs.put(new_run(run_id, {"task": "t"}, now=NOW, state=RunState.REJECTED))
    announced: list[str] = []

    def announce(run_id: str) -> str:
        if run_id == "run-ended-1":
            raise AttributeError("a bug in announcing this run")
        announced.append(run_id)
        return "announced"

    def listing() -> list[RunRecord]:
        raise ValueError("the store's answer could not be read")

    deps = replace(w.reconciler_deps(), announce=announce, unannounced=w.runs.unannounced_or_unreadable)
    assert _reconcile(deps) == "announced=1 error=1 unchanged=1"
    assert announced == ["run-ended-2"]
    said = _reconcile(replace(deps, open_runs=listing, changes=ChangeDeps(watermarks=FakeWatermarks())))
    assert said == "announced=1 error=1 open-runs-error=1 watermark-kept=1", said
