"""Plans that learn, against the Firestore emulator: a finished run's figures recorded the way the listener records
them (functions/wiring.py _measure), the dispatcher's planner reading them back (wiring._plan: one query) and
planning from them, and `landfall plan` showing which figures are measured and how far past estimates were."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from functions import wiring
from functions.gcp import clients
from functions.planning import plan_input_from_request, plan_request
from landfall.cli import build_parser
from schemas.run_record import RunRecord, RunState, Timings, parse_run_record
from schemas.training_request import TrainingRequest, parse_training_request
from tests.conftest import Emulator

EXAMPLES = Path(__file__).parents[2] / "schemas/examples"
REQUEST = EXAMPLES / "training_request.json"


@pytest.fixture()
def wired(clean_firestore: Emulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The functions' clients and stores made afresh against this emulator."""
    made = (
        clients.firestore_client,
        wiring.measurements_store,
        wiring.capacity_store,
        wiring.dispatcher_planner_config,
    )
    for cached in made:
        cached.cache_clear()
    yield
    for cached in made:
        cached.cache_clear()


def _finished_run(request: TrainingRequest, step_seconds: float, steps: int, run_seconds: float) -> RunRecord:
    """The golden run record as a SUCCEEDED run of `request`, planned from the model, with these measurements."""
    plan = plan_request(plan_input_from_request(request), wiring.dispatcher_planner_config()).plan
    assert plan is not None
    golden = parse_run_record(json.loads((EXAMPLES / "run_record.json").read_text()))
    return replace(
        golden,
        run_id="run-learned-1",
        state=RunState.SUCCEEDED,
        request=json.loads(REQUEST.read_text()),
        plan=plan,
        metrics={"steps": steps, "step_seconds": step_seconds, "samples_per_second": 64 / step_seconds},
        timings=Timings(started_at="2026-11-20T10:00:00Z", ended_at="2026-11-20T10:01:10Z", run_seconds=run_seconds),
    )


def test_a_finished_runs_figures_plan_the_next_run_of_its_workload_and_landfall_plan_says_so(
    wired: None, capsys: pytest.CaptureFixture[str]
) -> None:
    request = parse_training_request(REQUEST.read_text())
    model = wiring._plan(request).plan  # nothing measured yet: the model's plan
    assert model is not None and not any(a.startswith("measured") for a in model.assumptions)
    steps = plan_request(plan_input_from_request(request), wiring.dispatcher_planner_config()).evaluation
    planned_steps = steps.workload.steps
    run = _finished_run(request, step_seconds=0.15, steps=planned_steps, run_seconds=26.0 + planned_steps * 0.15)
    wiring._measure(run)  # what the listener does once the run is SUCCEEDED
    wiring._measure(run)  # a repeated delivery: the same document

    learned = wiring._plan(request).plan
    assert learned is not None
    notes = "\n".join(learned.assumptions)
    # the measured step is ~100x the model's CPU step: the plan may move to a faster machine, scaled by the model
    step_note = next(a for a in learned.assumptions if a.startswith("measured") and "step time" in a)
    assert "run run-learned-1" in step_note
    assert "startup 26" in notes and "modelled: memory" in notes
    if learned.machine_type == model.machine_type:
        assert step_note.startswith("measured: step time 0.15 s from run run-learned-1")
        assert learned.estimated_hours * 3600 == pytest.approx(26.0 + planned_steps * 0.15, rel=1e-3)
    else:
        assert step_note.startswith("measured (scaled): step time = the model's x")

    args: argparse.Namespace = build_parser().parse_args(["plan", str(REQUEST), "--measured", "auto"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "figures:\n  - measured" in out and "run-learned-1" in out
    assert "past estimates for this workload:\n  1 past run planned from the model: estimate off by" in out
    assert "run-learned-1" in out
    args = build_parser().parse_args(["plan", str(REQUEST), "--measured", "off"])
    assert args.func(args) == 0
    assert "past estimates" not in capsys.readouterr().out


def test_a_stored_measurement_that_no_longer_fits_is_left_alone_and_the_dispatcher_plans_from_the_model(
    wired: None, caplog: pytest.LogCaptureFixture
) -> None:
    from google.cloud import firestore

    from functions.records.measurements import measurement_from_run, planner_steps
    from functions.settings import get_settings
    from tests.conftest import PROJECT

    request = parse_training_request(REQUEST.read_text())
    planned = plan_request(plan_input_from_request(request), wiring.dispatcher_planner_config()).evaluation
    run = _finished_run(request, step_seconds=0.15, steps=planned.workload.steps, run_seconds=70.0)
    measurement = measurement_from_run(run, planner_steps(run.request))
    assert measurement is not None
    collection = firestore.Client(project=PROJECT).collection(get_settings().measurements_collection)
    collection.document(measurement.measurement_id).set({**measurement.to_document(), "step_seconds": "fast"})
    wiring._measure(run)  # logged, not raised: the run's event is not held back
    assert "not recorded" in caplog.text and "step_seconds" in caplog.text
    plan = wiring._plan(request).plan  # the query's document does not read: left out, logged; planned from the model
    assert plan is not None and not any(a.startswith("measured") for a in plan.assumptions)
    assert "left out of planning: it does not read" in caplog.text


def test_a_stored_figure_of_infinity_is_left_out_of_planning_and_the_others_plan_the_request(
    wired: None, caplog: pytest.LogCaptureFixture
) -> None:
    """A measurement stored with a step of Infinity (old code recorded what a team's code reported) beside one in
    range on another shape: the dispatcher's planner leaves the first out, logged, and plans from the second; the
    delivery does not fail (before, every request of the workload raised PlanInputError, for good)."""
    from google.cloud import firestore

    from functions.records.measurements import measurement_from_run, planner_steps
    from functions.settings import get_settings
    from tests.conftest import PROJECT

    request = parse_training_request(REQUEST.read_text())
    planned = plan_request(plan_input_from_request(request), wiring.dispatcher_planner_config()).evaluation
    run = _finished_run(request, step_seconds=0.15, steps=planned.workload.steps, run_seconds=70.0)
    good = measurement_from_run(run, planner_steps(run.request))
    assert good is not None and run.plan is not None
    other_shape = replace(run, plan=replace(run.plan, machine_type="n2-standard-32"))
    poisoned = measurement_from_run(other_shape, planner_steps(run.request))
    assert poisoned is not None and poisoned.measurement_id != good.measurement_id
    collection = firestore.Client(project=PROJECT).collection(get_settings().measurements_collection)
    collection.document(poisoned.measurement_id).set({**poisoned.to_document(), "step_seconds": float("inf")})
    collection.document(good.measurement_id).set(good.to_document())

    plan = wiring._plan(request).plan
    assert plan is not None and any("run run-learned-1" in a for a in plan.assumptions), plan.assumptions
    assert "left out of planning" in caplog.text and "step_seconds" in caplog.text


def test_preemptions_the_listener_recorded_price_the_dispatcher_s_spot_plan_and_landfall_plan_shows_them(
    wired: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Jobs that ran on Spot L4s and were preempted, recorded as the listener records them (the store's record),
    read back by the dispatcher's plan (one query) and by `landfall plan`."""
    from functions.records.capacity_events import job_ended
    from schemas.job_view import JobView

    raw = json.loads(REQUEST.read_text())
    raw["constraints"].update(gpu_allowlist=["NVIDIA_L4"], regions=["us-central1"], spot="required", max_gpus=1)
    request = parse_training_request(json.dumps(raw))
    before = wiring._plan(request).plan
    assert before is not None and before.spot and before.accelerator_type == "NVIDIA_L4"
    prior = next(a for a in before.assumptions if a.startswith("preemption: "))
    assert prior.startswith("preemption: 0.5 per machine-hour (the prior 0.5/h (nothing measured")

    record = wiring.capacity_store().record  # what wiring.listener_deps gives the listener as its `capacity`
    run = replace(_finished_run(request, 0.15, 10, 70.0), plan=before)
    for i in range(30):  # 30 jobs, each preempted after an hour on its one machine
        job = JobView(
            name=f"projects/p/locations/us-central1/customJobs/{900 + i}",
            job_id=str(900 + i),
            region="us-central1",
            display_name="",
            state="JOB_STATE_FAILED",
            error_code=14,
            error_message="preempted",
            create_time="2026-11-20T09:55:00Z",
            start_time="2026-11-20T10:00:00Z",
            end_time="2026-11-20T11:00:00Z",
            labels={},
        )
        event = job_ended(run, job, "preempted", wiring.utc_now())
        assert event is not None
        record(event)
        record(event)  # a repeated delivery: the same document
    wiring.capacity_store().forget()
    after = wiring._plan(request).plan
    assert after is not None
    # (0.5/h x 10 machine-hours + 30) / (10 + 30) = 0.875 preemptions per machine-hour
    measured = next(a for a in after.assumptions if a.startswith("preemption: "))
    assert measured.startswith(
        "preemption: 0.875 per machine-hour (30 preemption(s) over 30 machine-hours of NVIDIA_L4"
    )
    assert after.estimated_hours > before.estimated_hours

    path = tmp_path / "spot.json"
    path.write_text(json.dumps(raw))
    args: argparse.Namespace = build_parser().parse_args(["plan", str(path), "--measured", "auto", "--json"])
    assert args.func(args) == 0
    shown = json.loads(capsys.readouterr().out)
    assert any(a.startswith("preemption: 0.875 per machine-hour") for a in shown["assumptions"]), shown


def test_a_finished_run_of_one_workload_corrects_another_workloads_plan_on_its_gpu_kind(wired: None) -> None:
    """Learning across workloads: a run of gpt-tiny at batch 16 on one L4, measured 3 x slower than the model said,
    recorded as the listener records it; a new workload (the same model at batch 32) is planned on the L4 with its
    step corrected by that run, weighted by how alike the two are, and says so."""
    raw = json.loads(REQUEST.read_text())
    raw.update(task="causal-lm", model={"preset": "gpt-tiny", "label_column": "label"})
    raw["hyperparameters"]["batch_size"] = 16
    raw["constraints"].update(gpu_allowlist=["NVIDIA_L4"], regions=["us-central1"], spot="never", max_gpus=1)
    first = parse_training_request(json.dumps(raw))
    plan = wiring._plan(first).plan
    assert plan is not None and plan.accelerator_type == "NVIDIA_L4"
    modelled = plan_request(plan_input_from_request(first), wiring.dispatcher_planner_config()).evaluation
    steps = modelled.workload.steps
    model_step = (plan.estimated_hours * 3600 - 300.0) / steps
    run = _finished_run(first, 3 * model_step, steps, 40.0 + steps * 3 * model_step)
    run = replace(run, plan=plan, request=json.loads(json.dumps(raw)))
    wiring._measure(run)

    raw["hyperparameters"]["batch_size"] = 32
    second = parse_training_request(json.dumps(raw))
    before = plan_request(plan_input_from_request(second), wiring.dispatcher_planner_config()).plan
    after = wiring._plan(second).plan
    assert before is not None and after is not None and after.machine_type == before.machine_type
    note = next(a for a in after.assumptions if a.startswith("measured on similar work"))
    assert "run-learned-1" in note and "NVIDIA_L4" in note
    assert after.figures_from == "model, scaled by similar work measured on L4"
    # between the model's step and 3 x it: moved by likeness, not replaced
    slower = (before.samples_per_second_per_gpu or 0) / (after.samples_per_second_per_gpu or 1)
    assert 1.3 < slower < 3, (slower, note)
