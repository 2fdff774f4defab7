"""Start-up is the machine's and the image's, not the work's: a new workload is planned with the start-up other
workloads' runs measured on the same shape and image, its own measurement wins once it has one, and the plan says
where each came from."""

from __future__ import annotations

import dataclasses

import pytest

from functions.planning import plan_input_from_request, plan_request
from functions.planning.measured import MeasuredFigures
from functions.records.measurements import startup_figures
from schemas.measurement import LANDFALL_IMAGE, Measurement
from tests.unit.test_canary import REQUEST


def _measured(workload: str, machine: str, startup: float, at: str, image: str = LANDFALL_IMAGE) -> Measurement:
    return Measurement(
        workload=workload,
        workload_label=workload,
        machine_type=machine,
        accelerator_type="",
        accelerator_count=0,
        nodes=1,
        image=image,
        run_id=f"run-{workload}-{at[:10]}",
        source="run",
        measured_at=at,
        step_seconds=0.5,
        startup_seconds=startup,
    )


def test_other_workloads_start_ups_are_taken_one_per_shape_newest_first_and_only_with_the_same_image() -> None:
    found = startup_figures(
        [
            _measured("other", "n2-standard-8", 50.0, "2026-11-01T00:00:00Z"),
            _measured("third", "n2-standard-8", 40.0, "2026-11-02T00:00:00Z"),
            _measured("mine", "n2-standard-16", 10.0, "2026-11-03T00:00:00Z"),  # its own: planner_figures has it
            _measured("other", "n2-standard-4", 30.0, "2026-11-03T00:00:00Z", image="us-docker.pkg.dev/p/r/t:1"),
        ],
        LANDFALL_IMAGE,
        "mine",
    )
    assert [(f.machine_type, f.startup_seconds, f.source, f.step_seconds) for f in found] == [
        ("n2-standard-8", 40.0, "startup", 0.0)
    ]


def test_a_new_workload_plans_with_the_start_up_its_machine_showed_for_other_work() -> None:
    first = plan_request(plan_input_from_request(REQUEST)).plan
    assert first is not None
    learned = MeasuredFigures(
        workload="another",
        machine_type=first.machine_type,
        accelerator_type=first.accelerator_type or "",
        accelerator_count=first.accelerator_count,
        startup_seconds=20.0,
        run_id="run-other",
        source="startup",
        measured_at="2026-11-20T00:00:00Z",
    )
    pinned = dataclasses.replace(
        REQUEST, constraints=dataclasses.replace(REQUEST.constraints, machine_type=first.machine_type)
    )
    again = plan_request(plan_input_from_request(pinned), measured=[learned]).plan
    assert again is not None and (again.machine_type, again.replica_count) == (first.machine_type, 1)
    assert again.estimated_step_time_seconds == pytest.approx(first.estimated_step_time_seconds)  # steps: the model's
    assert again.estimated_hours < first.estimated_hours
    note = next(a for a in again.assumptions if "startup" in a)
    assert note.startswith("measured on this machine by other work: startup 20 s from startup run-other")
    own = dataclasses.replace(learned, workload="mine", startup_seconds=35.0, run_id="run-mine", source="run")
    mine = plan_request(plan_input_from_request(pinned), measured=[learned, own]).plan
    assert mine is not None
    assert any(a.startswith("measured: startup 35 s from run run-mine") for a in mine.assumptions)


def test_machines_nobody_measured_start_like_those_other_work_measured_not_like_the_assumption() -> None:
    first = plan_request(plan_input_from_request(REQUEST)).plan
    assert first is not None and first.machine_type != "n2-standard-32"
    learned = MeasuredFigures(
        workload="another",
        machine_type="n2-standard-32",  # a shape the plan does not take: its start-up stands for the others
        startup_seconds=20.0,
        run_id="run-other",
        source="startup",
        measured_at="2026-11-20T00:00:00Z",
    )
    plan = plan_request(plan_input_from_request(REQUEST), measured=[learned]).plan
    assert plan is not None and plan.machine_type != "n2-standard-32"
    assert "measured (mean of other machines): startup 20 s" in plan.assumptions, plan.assumptions
    assert plan.estimated_hours < first.estimated_hours
