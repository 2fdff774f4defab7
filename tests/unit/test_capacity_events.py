"""What capacity jobs met, recorded for the planner (schemas/capacity_event.py, functions/records/capacity_events.py):
the dispatcher's refused calls and the listener's ended jobs, against the fakes; the schema's rules; the history the
planner reads back."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from google.api_core import exceptions as gexc

from functions.dispatch.handler import attempt_policy, resubmit
from functions.planning.risk import preemption_rate, refusal_share
from functions.records.capacity_events import capacity_history
from schemas.capacity_event import CapacityEvent, parse_capacity_event
from schemas.errors import SchemaError
from tests.fakes.world import FALLBACK_1, NOW, PLAN, World

EXAMPLE = Path(__file__).resolve().parents[2] / "schemas" / "examples" / "capacity_event.json"
STOCKOUT = "Resources are insufficient in region: us-central1. Try a different region or use a different accelerator."


def _world() -> World:
    w = World()
    w.vertex.now = w.clock  # Vertex's create times on the test's clock
    w.listener_deps = replace(
        w.listener_deps,
        resubmit=lambda run_id: resubmit(run_id, w.dispatch_deps),
        policy=attempt_policy(w.dispatch_deps.settings),
    )
    return w


@pytest.mark.parametrize(
    ("refusal", "outcome"),
    [
        (gexc.ResourceExhausted("Quota exceeded for aiplatform.googleapis.com/custom_model_training_cpus"), "quota"),
        (gexc.ResourceExhausted(STOCKOUT), "stockout"),
    ],
)
def test_a_refused_call_is_recorded_once_per_attempt_with_its_shape(refusal: Exception, outcome: str) -> None:
    w = _world()
    w.vertex.refuse("us-central1", refusal)
    assert w.deliver() == "submitted"
    (event,) = w.capacity
    attempt = (w.run().submission.attempts or ())[0]
    assert (event.kind, event.outcome, event.region, event.machine_type, event.mode) == (
        "refused",
        outcome,
        "us-central1",
        PLAN.machine_type,
        PLAN.mode,
    )
    assert event.run_id == w.run().run_id and event.refused and event.lost_seconds == 0
    assert event.event_id.startswith("refused-") and attempt.region == "us-central1"
    assert w.deliver() == "duplicate:SUBMITTED" and len(w.capacity) == 1  # a repeated delivery tries nothing


def test_a_job_that_ran_and_one_refused_after_acceptance_are_recorded_with_their_times() -> None:
    w = _world()
    assert w.deliver() == "submitted"
    first = w.job_name()
    # accepted at NOW, refused for a stockout 20 minutes later without having started
    w.clock.now = NOW + timedelta(minutes=20)
    w.vertex.set_state(first, "JOB_STATE_FAILED", end=w.clock.now, error=(8, STOCKOUT))
    assert w.job_event(first.rsplit("/", 1)[-1]) == "resubmitted:submitted"
    refused = w.capacity[-1]
    assert (refused.kind, refused.outcome, refused.region, refused.running_hours) == ("job", "stockout", PLAN.region, 0)
    assert refused.lost_seconds == pytest.approx(1200.0)
    second = w.job_name()
    assert second != first
    w.vertex.set_state(second, "JOB_STATE_RUNNING", start=NOW + timedelta(minutes=25))
    w.job_event(second.rsplit("/", 1)[-1])
    w.vertex.set_state(second, "JOB_STATE_SUCCEEDED", end=NOW + timedelta(minutes=115))
    w.objects[f"{w.run().artifacts.model_dir}/metrics.json"] = json.dumps({"steps": 10})  # type: ignore[union-attr]
    w.job_event(second.rsplit("/", 1)[-1])
    ran = w.capacity[-1]
    assert (ran.event_id, ran.outcome, ran.region) == (
        f"job-{second.rsplit('/', 1)[-1]}",
        "succeeded",
        FALLBACK_1.region,
    )
    assert ran.running_hours == pytest.approx(1.5) and ran.lost_seconds == 0
    # a repeated delivery of the end writes the same event again (one document: the same id)
    w.job_event(second.rsplit("/", 1)[-1])
    assert w.capacity[-1] == ran and len({e.event_id for e in w.capacity}) == 2


def test_a_preempted_spot_job_is_exposure_and_a_preemption() -> None:
    spot = replace(PLAN, mode="spot")
    w = _world()
    w.outcome = replace(w.outcome, plan=spot, fallbacks=(replace(FALLBACK_1, mode="spot"),))
    assert w.deliver() == "submitted"
    name = w.job_name()
    w.vertex.set_state(name, "JOB_STATE_RUNNING", start=NOW)
    w.job_event(name.rsplit("/", 1)[-1])
    w.vertex.set_state(
        name, "JOB_STATE_FAILED", end=NOW + timedelta(hours=2), error=(14, "The VM was preempted (Spot).")
    )
    w.job_event(name.rsplit("/", 1)[-1])
    event = w.capacity[-1]
    assert (event.outcome, event.mode, event.preempted, event.running_hours) == ("preempted", "spot", True, 2.0)
    h = capacity_history(w.capacity).get(spot.accelerator_type or "", spot.region, "spot")
    assert h is not None and (h.preemptions, h.node_hours, h.tries) == (1, 2.0 * spot.replica_count, 1)


def test_the_history_counts_tries_refusals_and_exposure_per_kind_region_and_mode() -> None:
    base = parse_capacity_event(json.loads(EXAMPLE.read_text()))
    events = [
        replace(base, event_id="a", outcome="succeeded", running_hours=3.0),
        replace(base, event_id="b", kind="refused", outcome="stockout", running_hours=0.0),
        replace(base, event_id="c", outcome="quota", running_hours=0.0, lost_seconds=900.0),
        replace(base, event_id="d", region="us-east4", outcome="preempted"),
        replace(base, event_id="e", mode="on_demand", outcome="succeeded"),
    ]
    history = capacity_history(events)
    h = history.get("NVIDIA_L4", "us-central1", "spot")
    assert h is not None and (h.tries, h.refusals, h.timed_refusals, h.preemptions) == (3, 2, 1, 0)
    assert h.node_hours == 3.0 * base.nodes
    from functions.planning.catalog import load_catalog

    job = load_catalog().assumptions.job
    assert refusal_share(h, job) == pytest.approx(2 / (3 + job.stockout_prior_tries))
    east = history.get("NVIDIA_L4", "us-east4", "spot")
    assert east is not None and preemption_rate(east, job) == pytest.approx((5 + 1) / (10 + 1.25 * 2))
    assert history.get("NVIDIA_L4", "us-central1", "on_demand") is not None


def test_the_example_reads_and_bad_events_are_refused_naming_what_is_wrong() -> None:
    event = parse_capacity_event(json.loads(EXAMPLE.read_text()))
    assert event.to_document() == json.loads(EXAMPLE.read_text())
    changes: list[tuple[dict[str, object], str]] = [
        ({"mode": "cheap"}, "mode"),
        ({"outcome": "maybe"}, "outcome"),
        ({"kind": "refused", "outcome": "preempted"}, "a refused call's outcome"),
        ({"nodes": 0}, "nodes"),
        ({"running_hours": 1e9}, "running_hours"),
        ({"lost_seconds": -1}, "lost_seconds"),
    ]
    for change, said in changes:
        with pytest.raises(SchemaError, match=said):
            parse_capacity_event({**event.to_document(), **change})
    with pytest.raises(SchemaError, match="Infinity"):
        parse_capacity_event({**event.to_document(), "running_hours": float("inf")})
    assert event == CapacityEvent(**json.loads(EXAMPLE.read_text()))


def test_a_capacity_store_that_fails_holds_nothing_back() -> None:
    """The events are observations for the planner: a store that refuses them (a permission, an outage) is logged,
    and the run moves on to its next plan and ends as if it had answered."""

    def refuses(event: CapacityEvent) -> None:
        raise PermissionError("the store refused it")

    w = _world()
    w.dispatch_deps = replace(w.dispatch_deps, capacity=None)  # the dispatcher's own is best effort (wiring)
    w.listener_deps = replace(w.listener_deps, capacity=refuses)
    assert w.deliver() == "submitted"
    first = w.job_name()
    w.vertex.set_state(first, "JOB_STATE_FAILED", end=NOW + timedelta(minutes=5), error=(8, STOCKOUT))
    assert w.job_event(first.rsplit("/", 1)[-1]) == "resubmitted:submitted"
    assert w.run().vertex is not None and w.run().vertex.region == FALLBACK_1.region  # type: ignore[union-attr]


def test_a_gpu_refused_after_acceptance_leaves_the_same_machine_with_another_gpu_to_try() -> None:
    """A T4 stockout on n1-standard-4 says nothing of a P4 on the same machine type in the same region: the run's
    next job is the P4 plan there, not a wait (jobs that ended for capacity are matched by their GPU too)."""
    t4 = replace(PLAN, machine_type="n1-standard-4", accelerator_type="NVIDIA_TESLA_T4", accelerator_count=1)
    p4 = replace(t4, accelerator_type="NVIDIA_TESLA_P4")
    w = _world()
    w.outcome = replace(w.outcome, plan=t4, fallbacks=(p4,))
    assert w.deliver() == "submitted"
    first = w.job_name()
    w.vertex.set_state(first, "JOB_STATE_FAILED", end=NOW + timedelta(minutes=5), error=(8, STOCKOUT))
    assert w.job_event(first.rsplit("/", 1)[-1]) == "resubmitted:submitted"
    run = w.run()
    assert run.plan is not None and (run.plan.region, run.plan.accelerator_type) == (PLAN.region, "NVIDIA_TESLA_P4")
    (ended,) = run.submission.jobs or ()
    assert ended.accelerator_type == "NVIDIA_TESLA_T4"
