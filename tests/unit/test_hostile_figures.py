"""Hostile figures from a team's code or a canary: every record they reach (a measurement, a canary's figures on the
run, the run's metrics and warnings, a registry version's metadata) is written with Infinity, -Infinity, NaN, a
step of 1e9 s, negative numbers, integers past 64 bits, huge strings, deep nesting and many fields, and each value
is either refused or left out at write, or reads back as written; then the same figures through the listener and
the canary's end (the run goes on, with warnings), and planning that meets a figure it refuses goes on without it."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from functions.gcp.model_registry import version_view
from functions.planning.risk import NO_HISTORY
from functions.records.measurements import measurement_from_canary, measurement_from_run, planner_figures
from landfall.commands.runs import describe
from schemas.canary import (
    FIGURE_FIELDS,
    CanaryFigures,
    CanaryRecord,
    metric_line_figures,
    parse_canary_record,
    read_canary_report,
)
from schemas.errors import SchemaError
from schemas.measurement import FIGURE_RULES, Measurement, parse_measurement
from schemas.model_version import stored_metadata
from schemas.record_bounds import STORED_BOUNDS, WARNING_TEXT, WARNINGS_KEPT
from schemas.run_metrics import FIGURES, figure_problem, stored_metrics
from schemas.run_record import RunRecord, RunState, parse_run_record
from tests.fakes.documents import copy_document
from tests.fakes.world import NOW, PLAN, World
from tests.stored_limits import firestore_problems
from tests.unit.test_canary import canary_dir, canary_world, jobs

INF, NAN = float("inf"), float("nan")
NUMBERS: tuple[object, ...] = (INF, -INF, NAN, 1e9, -1.0, -1, 10**30, True, "fast", [1.0])
"""Hostile values of a figure."""


def _deep(levels: int) -> dict[str, Any]:
    out: dict[str, Any] = {"leaf": 1.0}
    for _ in range(levels):
        out = {"d": out}
    return out


HOSTILE_METRICS: dict[str, Any] = {
    "warnings": "not a list",
    "steps": 10**30,
    "step_seconds": INF,
    "samples_per_second": -INF,
    "peak_memory_bytes": NAN,
    "final": {"loss": NAN, "accuracy": 0.9, "step_seconds": 1e9, "blob": "x" * 1_500_000, "bad\ud800": 1},
    "deep": _deep(30),
    "nested": [[1, 2], [3]],
    "__reserved__": 1,
    "many": {f"field_{i}": i for i in range(6_000)},
}
"""A metrics.json no reader or Firestore takes as it is."""


def _stored(record: Any) -> object:
    """What reads back of a record written as a document (the fakes' copy: plain data, as Firestore hands it)."""
    return copy_document(record)


def _refused_or_reads_back(make: Callable[[], Any], write: Callable[[Any], Any], read: Callable[[Any], Any]) -> str:
    try:
        record = make()
    except SchemaError:
        return "refused"
    written = write(record)
    assert read(_stored(written)) == record, written
    return "reads back"


# -- each record type, written with hostile values


@pytest.mark.parametrize("name", sorted(FIGURE_RULES))
@pytest.mark.parametrize("value", NUMBERS, ids=repr)
def test_a_measurement_holding_a_hostile_figure_is_refused_at_write_and_at_read(name: str, value: object) -> None:
    good = Measurement(
        workload="wl-1", workload_label="", machine_type="n2-standard-8", accelerator_type="", accelerator_count=0,
        nodes=1, image="img", run_id="r", source="run", measured_at="2026-11-22T12:00:00Z", step_seconds=0.5,
    )  # fmt: skip
    said = _refused_or_reads_back(
        lambda: dataclasses.replace(good, **{name: value}),  # type: ignore[arg-type]
        Measurement.to_document,
        parse_measurement,
    )
    in_range = figure_problem(FIGURE_RULES[name], value) is None  # 1e9 samples a second is one
    assert said == ("reads back" if in_range else "refused")
    if not in_range:
        with pytest.raises(SchemaError, match=name):
            parse_measurement({**good.to_document(), name: value})


def test_measurements_of_hostile_figures_leave_them_unmeasured_and_read_back() -> None:
    w = World()
    assert w.deliver() == "submitted"
    stored_before_the_rules = dataclasses.replace(
        w.run(),
        state=RunState.SUCCEEDED,
        metrics=HOSTILE_METRICS,
        timings=dataclasses.replace(w.run().timings, run_seconds=600.0, ended_at="2026-11-22T12:10:00Z"),
    )
    from_run = measurement_from_run(stored_before_the_rules, 10**13)
    from_canary = measurement_from_canary(
        stored_before_the_rules, {"step_seconds": 1e9, "peak_memory_bytes": INF, "samples_per_second": 1e-12}, "t"
    )
    # the step worked out from a throughput of 1e-12 samples a second (6.4e13 s) is out of its range too
    assert from_run is not None and from_canary is not None and from_canary.step_seconds == 0.0
    assert (
        measurement_from_canary(stored_before_the_rules, {"step_seconds": INF, "samples_per_second": NAN}, "t") is None
    )
    figures = [getattr(from_run, name) for name in ("step_seconds", "samples_per_second", "peak_memory_gib", "steps")]
    assert figures == [0.0, 0.0, 0.0, 0]
    assert parse_measurement(_stored(from_run.to_document())) == from_run
    assert len(planner_figures([from_run])) == 1


@pytest.mark.parametrize("name", FIGURE_FIELDS)
@pytest.mark.parametrize("value", NUMBERS, ids=repr)
def test_canary_figures_are_refused_when_made_left_out_when_reported_and_a_stored_one_reads_as_unmeasured(
    name: str, value: object
) -> None:
    with pytest.raises(SchemaError, match=name):
        CanaryFigures(**{name: value})  # type: ignore[arg-type]
    report = json.dumps({"steps": 8, "step_seconds": 0.5, name: value})  # json writes Infinity and NaN
    figures, notes = read_canary_report(report)
    assert getattr(figures, name) in (None, 0) and len(notes) == 1 and name in notes[0]
    record = CanaryRecord("passed", "jobs/1", "1", "us-central1", "n2", "t", 0.5, 1).ended(
        "passed", at="t", figures=figures, verdict="v"
    )
    assert parse_canary_record(_stored(record.to_dict())) == record
    stored = {**record.to_dict(), "figures": {**record.to_dict()["figures"], name: value}}  # before the rules
    assert getattr(parse_canary_record(stored).figures, name) in (None, 0)


def test_a_teams_canary_lines_with_hostile_figures_give_the_figures_in_range_and_say_what_was_left_out() -> None:
    lines = [
        {"step": 1, "step_seconds": 0.5},
        {"step": 2, "step_seconds": INF, "peak_memory_bytes": NAN},
        {"step": 3, "step_seconds": 1e9, "peak_memory_bytes": 2**30},
        {"step": 10**30, "step_seconds": -1, "peak_memory_bytes": "x" * 1_000_000},
        {"step": 4, "step_seconds": 0.7},
    ]
    figures, notes = metric_line_figures("\n".join(json.dumps(line) for line in lines))
    assert (figures.steps, figures.step_seconds, figures.peak_memory_bytes) == (4, 0.7, 2**30)
    said = "\n".join(notes)
    assert "step_seconds = inf, 1000000000.0, -1 left out (3 times)" in said
    assert "peak_memory_bytes = nan" in said and "step = 1000000000000000000000000000000" in said
    assert all(len(n) < 400 for n in notes)


def test_hostile_metrics_are_stored_without_what_firestore_or_a_reader_refuses_and_read_back() -> None:
    metrics, notes = stored_metrics(HOSTILE_METRICS)
    w = World()
    assert w.deliver() == "submitted"
    run = dataclasses.replace(w.run().warned(notes), metrics=metrics)
    doc = run.to_document()
    assert firestore_problems("runs/r", doc) == []
    assert parse_run_record(_stored(doc)) == run
    kept = json.dumps(metrics, allow_nan=False)  # no NaN or Infinity left in it
    assert "fast" not in kept and "warnings" not in metrics and "__reserved__" not in metrics
    assert metrics["final"]["accuracy"] == 0.9 and metrics["final"]["blob"].endswith("(1500000 characters)")
    said = "\n".join(run.warnings)
    for what in ("metrics.step_seconds = inf", "metrics.final.loss = nan", "deeper than 10 levels", "nested arrays"):
        assert what in said, said
    assert "metrics.warnings left out" in said and f"under {STORED_BOUNDS.size:,} bytes" in said


def test_the_runs_warnings_are_bounded_in_count_and_length_and_read_back() -> None:
    w = World()
    assert w.deliver() == "submitted"
    run = w.run().warned(f"{i}: {'x' * 1_000_000}" for i in range(1_000))
    assert len(run.warnings) == WARNINGS_KEPT and all(len(t) < WARNING_TEXT + 40 for t in run.warnings)
    assert parse_run_record(_stored(run.to_document())) == run
    assert run.warned(run.warnings) is run
    with pytest.raises(SchemaError, match="warnings"):
        parse_run_record({**run.to_document(), "warnings": ["x"] * (WARNINGS_KEPT + 1)})


def _version(metadata: dict[str, Any]) -> Any:
    from google.cloud.aiplatform_v1.types import Model

    return Model(name="projects/p/locations/us-central1/models/m", version_id="1", metadata=metadata)


def test_registry_metadata_is_written_without_hostile_values_and_a_version_holding_them_still_reads() -> None:
    metadata = {"run_id": "r", "final": dict(HOSTILE_METRICS["final"]), "lineage": HOSTILE_METRICS}
    written, notes = stored_metadata(metadata)
    assert notes and firestore_problems("models/m", written) == []
    assert version_view(_version(written)).metadata == written  # what is written reads back
    final = {k: v for k, v in HOSTILE_METRICS["final"].items() if k.isascii()}  # protobuf holds no lone surrogate
    # NaN, Infinity, 1e9 s a step and a 1.5 MB string, as uploaded before the rules: protobuf's JSON writer raises
    uploaded_before_the_rules = version_view(_version({"run_id": "r", "final": final}))
    assert uploaded_before_the_rules.metadata["final"]["accuracy"] == 0.9
    assert "loss" not in uploaded_before_the_rules.metadata["final"]


# -- through the listener and the canary's end


def test_a_canary_reporting_1e9_or_infinity_seconds_a_step_goes_on_with_its_plan_and_a_warning() -> None:
    for said in (1e9, INF):
        w = canary_world()
        assert w.deliver() == "submitted"
        lines = [{"step": s, "step_seconds": said} for s in range(1, 9)]
        w.objects[f"{canary_dir(w)}metrics.jsonl"] = "\n".join(json.dumps(line) for line in lines)
        w.vertex.set_state(w.job_name(), "JOB_STATE_SUCCEEDED", start=NOW, end=NOW + timedelta(minutes=3))
        assert w.job_event(w.job_name().rsplit("/", 1)[-1]) == "canary-passed:resubmitted:submitted", said
        run = w.run()
        assert run.canary is not None and run.canary.figures is not None
        assert run.canary.figures.step_seconds is None and "step time not reported" in run.canary.verdict
        assert run.plan == PLAN and w.replans == [] and [c for _, c in jobs(w)] == [True, False]
        assert any(f"step_seconds = {said!r} left out (8 times)" in t for t in run.warnings), run.warnings
        (measured,) = w.measured
        assert measured[1].step_seconds is None


def test_a_teams_code_reporting_infinity_and_nan_succeeds_with_warnings_and_measures_nothing_from_them() -> None:
    measured: list[RunRecord] = []
    w = World()
    w.listener_deps = dataclasses.replace(w.listener_deps, measure=measured.append)
    assert w.deliver() == "submitted"
    name = w.job_name()
    lines = [{"step": 1, "loss": NAN, "step_seconds": INF, "peak_memory_bytes": INF, "samples_per_second": -INF}]
    w.objects[f"{w.model_dir()}metrics.jsonl"] = "\n".join(json.dumps(line) for line in lines)
    w.vertex.set_state(name, "JOB_STATE_SUCCEEDED", start=NOW, end=NOW + timedelta(minutes=30))
    assert w.job_event(name.rsplit("/", 1)[-1]) == "recorded:SUCCEEDED"
    run = w.run()
    assert run.state == RunState.SUCCEEDED and run.metrics is not None
    assert run.metrics["final"] == {} and run.metrics["loss_curve"] == [{"step": 1}], run.metrics
    left_out = sorted(t.split(" = ")[0] for t in run.warnings)
    assert left_out == [
        *(f"metrics.final.{k}" for k in ("loss", "peak_memory_bytes", "samples_per_second", "step_seconds")),
        "metrics.loss_curve[0].loss",
    ]
    assert "\nwarning   metrics.final.step_seconds = inf left out: step_seconds must be" in describe(run)
    (after,) = measured
    measurement = measurement_from_run(after)
    assert measurement is not None and (measurement.step_seconds, measurement.peak_memory_gib) == (0.0, 0.0)


def test_planning_leaves_out_a_measurement_the_planner_refuses_and_logs_it(caplog: pytest.LogCaptureFixture) -> None:
    good = Measurement(
        workload="wl-1", workload_label="", machine_type="n2-standard-8", accelerator_type="", accelerator_count=0,
        nodes=1, image="img", run_id="a", source="run", measured_at="t",
    )  # fmt: skip
    odd = dataclasses.replace(good, accelerator_type="NVIDIA_L4", run_id="b")  # a type with no count
    with caplog.at_level(logging.WARNING, logger="landfall.measurements"):
        assert [f.run_id for f in planner_figures([odd, good])] == ["a"]
    assert "left out of planning" in caplog.text and odd.measurement_id in caplog.text


def test_every_figure_rule_names_a_range_that_holds_an_honest_figure() -> None:
    for name, rule in FIGURES.items():
        assert rule.problem(name, int(rule.high) if rule.integer else rule.high) is None, name
        assert rule.problem(name, rule.high * 2) is not None, name


def test_the_dispatcher_plans_from_the_model_when_the_planner_refuses_what_was_measured(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from functions import planning, wiring
    from functions.planning import PlanInputError
    from tests.fakes.world import REQUEST

    real = planning.plan_request

    def refusing(inputs: Any, config: Any = None, *, measured: Any = (), **kwargs: Any) -> Any:
        if measured:
            raise PlanInputError("a measured figure the planner refuses")
        return real(inputs, config, **kwargs)

    monkeypatch.setattr(planning, "plan_request", refusing)
    monkeypatch.setattr(wiring, "_measured", lambda request: ["a figure"])
    monkeypatch.setattr(wiring, "_capacity_history", lambda: NO_HISTORY)  # nor for capacity
    with caplog.at_level(logging.WARNING, logger="landfall.dispatch"):
        outcome = wiring._plan(REQUEST)
    assert outcome.plan is not None and "measured figures not used, planning from the model" in caplog.text
