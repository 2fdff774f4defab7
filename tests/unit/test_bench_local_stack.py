"""The load test's and latency benchmark's pure parts (bench/local_stack): the no-op trainer's upload address, the
percentiles, the hop-by-hop timeline, the lost / doubled checks, and the rate limits, the calls per minute,
the fallback-after-a-rate-limit and wait checks and the GPU caps sampled."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.local_stack.harness import percentile
from bench.local_stack.limits import (
    ALL_KINDS,
    Sample,
    calls_per_minute,
    cap_peaks,
    fallback_after_rate_limit,
    gpus_in_flight,
    limiter_per_minute,
    parked,
    quota_peaks,
    rate_limit_plan,
    rate_limits,
    waited_for_team,
)
from bench.local_stack.load import check
from bench.local_stack.noop_trainer import upload_url
from bench.local_stack.timeline import HOPS, timeline
from schemas.plan import parse_plan
from schemas.run_record import RunRecord, RunState, StateChange, Submission, SubmissionAttempt, Timings, new_run
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


# -- `make load`: the rate limits, the fallback and wait checks, the GPU caps sampled ----------------------

PLAN = parse_plan(json.loads((Path(__file__).resolve().parents[2] / "schemas/examples/plan_cpu.json").read_text()))


def attempt(machine_type: str, outcome: str, region: str = "us-central1") -> SubmissionAttempt:
    return SubmissionAttempt(region, machine_type, at(0), outcome, PLAN)


def with_attempts(*attempts: SubmissionAttempt) -> RunRecord:
    run = new_run("run-1", {"dataset": {"uri": "gs://b/ads/a/"}}, now=T0)
    return replace(run, submission=Submission(attempts=attempts))


def test_a_rate_limited_attempt_followed_by_another_plan_is_a_fallback_the_same_plan_is_not() -> None:
    limited = attempt("n1-standard-4", "rate-limited: Quota exceeded for quota metric 'Job or LRO submission requests'")
    moved = with_attempts(limited, attempt("g2-standard-4", "created"))
    elsewhere = with_attempts(limited, attempt("n1-standard-4", "created", region="europe-west4"))
    found = fallback_after_rate_limit(moved)
    assert found is not None and "g2-standard-4" in found and "n1-standard-4" in found
    assert fallback_after_rate_limit(elsewhere) is not None
    assert fallback_after_rate_limit(with_attempts(limited, attempt("n1-standard-4", "created"))) is None
    capacity = attempt("n1-standard-4", "capacity: The following quota metrics exceed quota limits: ...")
    assert fallback_after_rate_limit(with_attempts(capacity, attempt("g2-standard-4", "created"))) is None


def test_a_wait_for_anything_but_a_team_limit_is_reported() -> None:
    run = new_run("run-1", {"dataset": {"uri": "gs://b/ads/a/"}}, now=T0)
    capacity = replace(run, history=(*run.history, StateChange(RunState.WAITING, at(5), "no plan left: capacity")))
    team = replace(run, history=(*run.history, StateChange(RunState.WAITING, at(5), "team-cap: ads has 4 GPUs")))
    found = parked(capacity)
    assert found is not None and "no plan left" in found
    assert parked(team) is None and parked(run) is None
    assert waited_for_team(team) and not waited_for_team(capacity) and not waited_for_team(run)


def test_the_cap_sampler_catches_a_team_over_its_cap_and_only_in_the_samples_where_it_was() -> None:
    samples = [
        Sample(1.0, (("r1", {"NVIDIA_TESLA_T4": 1}), ("r2", {"NVIDIA_L4": 1}), ("r9", {"NVIDIA_L4": 8}))),
        Sample(2.0, (("r1", {"NVIDIA_TESLA_T4": 1}), ("r2", {"NVIDIA_L4": 1}), ("r3", {"NVIDIA_TESLA_T4": 1}))),
        Sample(3.0, (("r3", {"NVIDIA_TESLA_T4": 1}), ("r4", {"NVIDIA_TESLA_T4": 2}))),
    ]
    team_of = {"r1": "ads", "r2": "ads", "r3": "ads", "r4": "fraud"}  # r9: a run of no team, not counted
    caps = {"ads": {ALL_KINDS: 2, "NVIDIA_TESLA_T4": 2}, "fraud": {ALL_KINDS: 2}}
    peaks = {(c.team, c.kind): c for c in cap_peaks(samples, team_of, caps)}
    assert peaks[("ads", ALL_KINDS)].peak == 3 and peaks[("ads", ALL_KINDS)].over == ((2.0, 3),)
    assert peaks[("ads", "NVIDIA_TESLA_T4")].peak == 2 and peaks[("ads", "NVIDIA_TESLA_T4")].over == ()
    assert peaks[("fraud", ALL_KINDS)].peak == 2 and peaks[("fraud", ALL_KINDS)].over == ()
    assert gpus_in_flight(samples[0], team_of) == {
        ("ads", "NVIDIA_TESLA_T4"): 1,
        ("ads", "NVIDIA_L4"): 1,
        ("ads", ALL_KINDS): 2,
    }


def test_calls_per_minute_start_at_the_drops_and_quotas_add_their_methods_up() -> None:
    m = 29_000_000 * 60
    per_minute = {
        "CreateCustomJob r1": {str(m - 60): {"calls": 9, "refused": 0}, str(m + 60): {"calls": 50, "refused": 2}},
        "UploadModel r1": {str(m + 60): {"calls": 30, "refused": 0}},
        "GetCustomJob r1": {str(m): {"calls": 7, "refused": 0}},
    }
    rows = calls_per_minute(per_minute, start=m + 10)
    by_method = {r.method: r for r in rows}
    assert by_method["CreateCustomJob"].calls == (0, 50) and by_method["CreateCustomJob"].refused == (0, 2)
    assert by_method["GetCustomJob"].calls == (7, 0) and by_method["UploadModel"].peak == 30
    assert quota_peaks(rows) == {("submission", "r1"): 80, ("crud", "r1"): 7}


def test_rate_limits_are_google_s_figures_scaled_and_none_when_off() -> None:
    limits = rate_limits("real", 0.5)
    assert limits["CreateCustomJob"] == 30 and limits["UploadModel"] == 30 and limits["GetCustomJob"] == 300
    assert rate_limit_plan({"CreateCustomJob": 30}) == {"rate_limits": [{"method": "CreateCustomJob", "limit": 30}]}
    assert rate_limits("off", 1.0) == {} and rate_limit_plan({}) == {}
    assert limiter_per_minute(50, 0.5) == 25
    with pytest.raises(ValueError, match="real, off"):
        rate_limits("google", 1.0)
