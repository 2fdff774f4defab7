"""The load test's and latency benchmark's pure parts (bench/local_stack): the no-op trainer's upload address, the
percentiles, the hop-by-hop timeline, and the lost / doubled checks."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from bench.local_stack.harness import percentile
from bench.local_stack.load import check
from bench.local_stack.noop_trainer import upload_url
from bench.local_stack.timeline import HOPS, timeline
from schemas.run_record import RunState, StateChange, Timings, new_run
from schemas.times import format_timestamp

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def at(ms: int) -> str:
    return format_timestamp(T0 + timedelta(milliseconds=ms))


def test_noop_trainer_uploads_metrics_to_the_model_dir_through_the_json_api() -> None:
    url = upload_url("http://127.0.0.1:9023/", "gs://landfall-artifacts/runs/run-1/model/metrics.json")
    assert url == (
        "http://127.0.0.1:9023/upload/storage/v1/b/landfall-artifacts/o?uploadType=media&"
        "name=runs%2Frun-1%2Fmodel%2Fmetrics.json"
    )
    with pytest.raises(ValueError, match="gs://BUCKET/NAME"):
        upload_url("http://h", "/tmp/model/metrics.json")


@pytest.mark.parametrize(("q", "expected"), [(50, 5), (90, 9), (99, 10), (100, 10), (1, 1)])
def test_percentile_is_the_nearest_rank(q: float, expected: float) -> None:
    assert percentile([float(v) for v in range(10, 0, -1)], q) == expected


def test_timeline_splits_finalize_to_submitted_into_hops_that_add_up() -> None:
    run = new_run("run-1", {"dataset": {"uri": "gs://b/datasets/a/"}}, now=T0 + timedelta(milliseconds=120))
    history = (
        *run.history,
        StateChange(RunState.PLANNED, at(150)),
        StateChange(RunState.SUBMITTING, at(150)),
        StateChange(RunState.SUBMITTED, at(260)),
        StateChange(RunState.SUCCEEDED, at(900)),
    )
    run = replace(run, history=history, timings=Timings(created_at=at(120), submitted_at=at(260)))
    version = {"created_at": at(60), "updated_at": T0 + timedelta(milliseconds=100)}  # text or Firestore datetimes
    line = timeline(run, version, T0, T0 + timedelta(milliseconds=240))
    assert line.hops == pytest.approx(
        {"notification": 0.06, "ingest": 0.04, "delivery": 0.02, "plan": 0.03, "transactions": 0.09, "create": 0.02}
    )
    assert sum(v for v in line.hops.values() if v is not None) == pytest.approx(line.to_submitted)
    assert (line.to_submitted, line.to_succeeded) == pytest.approx((0.26, 0.9))
    unknown = timeline(run, None, T0)
    assert unknown.hops["notification"] is None and unknown.hops["create"] is None and set(unknown.hops) == set(HOPS)


def _run(run_id: str, uri: str, state: RunState = RunState.SUCCEEDED):
    return replace(new_run(run_id, {"dataset": {"uri": uri}}, now=T0), state=state)


def _job(run_id: str) -> SimpleNamespace:
    return SimpleNamespace(labels={"landfall-run-id": run_id})


def test_checks_find_lost_doubled_unfinished_and_orphan_runs() -> None:
    uris = ["gs://b/datasets/a/", "gs://b/datasets/b/", "gs://b/datasets/c/", "gs://b/datasets/d/"]
    runs = [_run("r-a", uris[0]), _run("r-b1", uris[1]), _run("r-b2", uris[1]), _run("r-c", uris[2], RunState.FAILED)]
    jobs = [_job("r-a"), _job("r-a"), _job("r-b1"), _job("r-b2"), _job("r-c"), _job("r-x")]
    found = check(uris, runs, jobs)
    assert found.lost == [uris[3]] and found.orphan_jobs == ["r-x"]
    assert found.doubled == [uris[1], "r-a (2 jobs)"] and list(found.not_succeeded) == ["r-c"]
    assert not found.ok
    clean = check(uris[:1], runs[:1], jobs[:1])
    assert clean.ok and (clean.runs, clean.jobs) == (1, 1)
