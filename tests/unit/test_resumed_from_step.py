"""`resumed_from_step`: the step a run's training resumed from, from its metrics (the built-in trainer's metrics.json
or a team's metrics lines) to the run's metrics, the attempt that made the job, and `landfall run`."""

from __future__ import annotations

import copy
import json
import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from landfall.commands.runs import describe, resumed_lines
from schemas.errors import SchemaError
from schemas.plan import parse_plan
from schemas.run_metrics import resumed_from_step, stored_metrics
from schemas.run_record import RunRecord, RunState, SubmissionAttempt, parse_run_record
from schemas.user_metrics import metrics_document
from tests.fakes.world import FALLBACK_1, NOW, World
from tests.unit.test_run_record import GOLDEN
from tests.unit.test_runs_end_true import job_id, stockout, submitted

STOCKOUT_THEN_RESUMED = {"steps": 100, "resumed_from_step": 40, "final": {"loss": 0.2}}


def _golden_attempts() -> list[dict[str, Any]]:
    attempts: list[dict[str, Any]] = copy.deepcopy(GOLDEN["submission"]["attempts"])
    return attempts


# --- the run record's attempt -------------------------------------------------------------------------------------


@pytest.mark.parametrize("step", [None, 0, 40])
def test_an_attempt_round_trips_with_and_without_resumed_from_step(step: int | None) -> None:
    doc = copy.deepcopy(GOLDEN)
    if step is not None:
        doc["submission"]["attempts"][-1]["resumed_from_step"] = step
    run = parse_run_record(doc)
    attempt = (run.submission.attempts or ())[-1]
    assert attempt.resumed_from_step == step
    stored = run.to_dict()["submission"]["attempts"][-1]
    assert ("resumed_from_step" in stored) == (step is not None) and stored.get("resumed_from_step") == step
    assert parse_run_record(run.to_dict()) == run


def test_an_older_attempt_without_the_field_reads_as_unknown() -> None:
    _refused, created = _golden_attempts()
    assert "resumed_from_step" not in created
    attempts = parse_run_record(copy.deepcopy(GOLDEN)).submission.attempts or ()
    assert [a.resumed_from_step for a in attempts] == [None, None]


@pytest.mark.parametrize("value", [-1, 1.5, "40", True, 2**64])
def test_a_stored_attempt_with_a_bad_resumed_from_step_names_the_field(value: object) -> None:
    doc = copy.deepcopy(GOLDEN)
    doc["submission"]["attempts"][1]["resumed_from_step"] = value
    with pytest.raises(SchemaError) as caught:
        parse_run_record(doc)
    assert caught.value.field == "run.submission.attempts[1].resumed_from_step"


# --- the run's metrics ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("step", [0, 40, 100])
def test_stored_metrics_keep_a_resumed_from_step_within_the_runs_steps(step: int) -> None:
    kept, notes = stored_metrics({"steps": 100, "resumed_from_step": step})
    assert kept["resumed_from_step"] == step and notes == [] and resumed_from_step(kept) == step


def test_stored_metrics_leave_out_a_resumed_from_step_past_the_runs_steps() -> None:
    kept, notes = stored_metrics({"steps": 100, "resumed_from_step": 101})
    assert "resumed_from_step" not in kept and kept["steps"] == 100
    assert notes == ["metrics.resumed_from_step left out: 101 is past the 100 steps the run reports it reached"]


HOSTILE = st.one_of(
    st.integers(max_value=-1),
    st.integers(min_value=10**12 + 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
)


@given(HOSTILE)
def test_a_hostile_resumed_from_step_is_refused_with_a_note_never_stored(value: object) -> None:
    kept, notes = stored_metrics({"resumed_from_step": value, "final": {"loss": 0.5}})
    assert "resumed_from_step" not in kept and kept["final"] == {"loss": 0.5}
    assert any("resumed_from_step" in note for note in notes)
    assert resumed_from_step({"resumed_from_step": value}) is None


def test_nan_and_infinity_in_a_metrics_file_are_refused_too() -> None:
    for text in ('{"resumed_from_step": NaN}', '{"resumed_from_step": Infinity}', '{"resumed_from_step": 1e400}'):
        value = json.loads(text)["resumed_from_step"]
        assert isinstance(value, float) and not math.isfinite(value)
        kept, notes = stored_metrics({"resumed_from_step": value})
        assert kept == {} and len(notes) == 1


def test_a_teams_metrics_lines_report_it_beside_steps_not_among_the_final_figures() -> None:
    lines = "\n".join(
        json.dumps(line)
        for line in ({"step": 41, "loss": 0.5, "resumed_from_step": 40}, {"step": 42, "loss": 0.4, "epoch": 1})
    )
    doc = metrics_document(lines, form="script")
    assert doc["resumed_from_step"] == 40 and doc["steps"] == 42 and "resumed_from_step" not in doc["final"]
    assert "resumed_from_step" not in metrics_document('{"step": 1, "loss": 0.5}', form="script")
    hostile, notes = stored_metrics(metrics_document('{"step": 3, "resumed_from_step": -5}', form="image"))
    assert "resumed_from_step" not in hostile and any("resumed_from_step" in n for n in notes)


# --- the listener --------------------------------------------------------------------------------------------------


def _succeed(w: World, metrics: dict[str, Any] | str) -> RunRecord:
    w.objects[f"{w.model_dir()}metrics.json"] = metrics if isinstance(metrics, str) else json.dumps(metrics)
    name = w.job_name()
    w.vertex.set_state(name, "JOB_STATE_SUCCEEDED", start=NOW, end=NOW)
    assert w.job_event(job_id(name)) == "recorded:SUCCEEDED"
    return w.run()


def test_the_listener_puts_the_step_on_the_attempt_that_made_the_job_that_resumed() -> None:
    w, first = submitted()
    assert stockout(w, first) == "resubmitted:submitted"
    run = _succeed(w, STOCKOUT_THEN_RESUMED)
    assert run.state == RunState.SUCCEEDED and run.metrics is not None and run.metrics["resumed_from_step"] == 40
    attempts = run.submission.attempts or ()
    assert [(a.region, a.resumed_from_step) for a in attempts] == [("us-central1", None), (FALLBACK_1.region, 40)]
    assert w.doc()["submission"]["attempts"][-1]["resumed_from_step"] == 40
    assert "resumed_from_step" not in w.doc()["submission"]["attempts"][0]


@pytest.mark.parametrize(
    ("metrics", "expected"),
    [
        ({"steps": 10, "resumed_from_step": 0}, 0),  # started fresh: known, and said
        ({"steps": 10}, None),  # the code does not say
        ({"steps": 10, "resumed_from_step": -3}, None),  # refused
        ({"steps": 10, "resumed_from_step": 11}, None),  # past the steps it reached
        ('{"steps": 10, "resumed_from_step": NaN}', None),
    ],
)
def test_the_attempt_keeps_only_a_step_the_metrics_check_passes(
    metrics: dict[str, Any] | str, expected: int | None
) -> None:
    w, _ = submitted()
    run = _succeed(w, metrics)
    assert [a.resumed_from_step for a in run.submission.attempts or ()] == [expected]
    assert run.metrics is not None and run.metrics.get("resumed_from_step") == expected
    assert (expected is None) == ("resumed_from_step" not in w.doc()["submission"]["attempts"][0])


# --- landfall run --------------------------------------------------------------------------------------------------


def test_landfall_run_says_where_a_resumed_run_picked_up() -> None:
    run = parse_run_record(copy.deepcopy(GOLDEN))
    resumed = replace(run, metrics={**(run.metrics or {}), **STOCKOUT_THEN_RESUMED})
    text = describe(resumed)
    assert "\nprogress  resumed at step 40 of 100\n" in text and text.count("resumed at step") == 1
    assert "resumed at" not in describe(run)


def test_the_dashboard_says_where_a_resumed_run_picked_up_and_what_its_stops_lost() -> None:
    from landfall.ui.views import run_row

    run = parse_run_record(copy.deepcopy(GOLDEN))
    lost = {**STOCKOUT_THEN_RESUMED, "work_lost_steps": 12, "work_lost_seconds": 3725.0}
    resumed = replace(run, metrics={**(run.metrics or {}), **lost})
    assert run_row(resumed)["resumed"] == "resumed at step 40 of 100; work lost: 12 steps (about 1h 02m)"
    assert run_row(run)["resumed"] == ""


@pytest.mark.parametrize(
    ("metrics", "lines"),
    [
        ({"resumed_from_step": 40}, ["progress  resumed at step 40"]),  # the steps reached unknown: no " of M"
        ({"resumed_from_step": 40, "steps": "lots"}, ["progress  resumed at step 40"]),
        ({"resumed_from_step": 0, "steps": 10}, []),  # started fresh
        ({"steps": 10}, []),
        ({"resumed_from_step": True, "steps": 10}, []),
        (
            {"resumed_from_step": 40, "steps": 100, "work_lost_steps": 7, "work_lost_seconds": 95.4},
            ["progress  resumed at step 40 of 100; work lost: 7 steps (about 1m 35s)"],
        ),
        (
            {"resumed_from_step": 40, "work_lost_steps": 1, "work_lost_seconds": "?"},  # the seconds unsaid
            ["progress  resumed at step 40; work lost: 1 step"],
        ),
        (
            {"resumed_from_step": 40, "work_lost_steps": 0, "work_lost_seconds": 0.0},
            ["progress  resumed at step 40; no work lost (each stop saved a checkpoint)"],
        ),
        (  # a team's code's figures out of range say nothing of the work lost
            {"resumed_from_step": 40, "work_lost_steps": -3, "work_lost_seconds": 1e300},
            ["progress  resumed at step 40"],
        ),
    ],
)
def test_the_resumed_line_only_for_a_run_that_resumed(metrics: dict[str, Any], lines: list[str]) -> None:
    assert resumed_lines(metrics) == lines


def test_a_plan_in_an_attempt_is_unchanged_by_the_step() -> None:
    created = _golden_attempts()[1]
    attempt = SubmissionAttempt(
        region=created["region"],
        machine_type=created["machine_type"],
        at=created["at"],
        outcome=created["outcome"],
        plan=parse_plan(created["plan"]),
        resumed_from_step=7,
    )
    assert attempt.to_dict() == {**created, "resumed_from_step": 7}
