"""What a finished run measured: the listener's Measurement (functions/records/measurements.py), the run's estimate
beside its actual time, the merge of repeated and later runs (schemas/measurement.py), and the figures as the
planner takes them."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta

import pytest

from functions.records.measurements import (
    estimate_summary,
    measurement_from_canary,
    measurement_from_run,
    planner_figures,
)
from schemas.errors import SchemaError
from schemas.measurement import (
    LANDFALL_IMAGE,
    MAX_ESTIMATES,
    EstimateCheck,
    Measurement,
    parse_measurement,
    workload_key,
)
from schemas.run_record import RunRecord, RunState
from tests.fakes.world import NOW, PLAN, World

STARTED = NOW + timedelta(minutes=2)
ENDED = STARTED + timedelta(minutes=30)
METRICS = {"steps": 1000, "step_seconds": 1.5, "samples_per_second": 40.0, "peak_memory_bytes": 3 * 2**30}


def succeeded(metrics: dict[str, object] | None = None) -> tuple[World, list[RunRecord]]:
    """A world whose one run succeeded after 1800 s with these metrics; the runs its listener measured."""
    measured: list[RunRecord] = []
    w = World()
    w.listener_deps = dataclasses.replace(w.listener_deps, measure=measured.append)
    assert w.deliver() == "submitted"
    (name,) = w.vertex.jobs
    artifacts = w.run().artifacts
    assert artifacts is not None
    w.objects[f"{artifacts.model_dir}metrics.json"] = json.dumps(METRICS if metrics is None else metrics)
    w.vertex.set_state(name, "JOB_STATE_SUCCEEDED", start=STARTED, end=ENDED)
    w.clock.now = ENDED
    assert w.job_event(name.rsplit("/", 1)[-1]) == "recorded:SUCCEEDED"
    return w, measured


def test_a_succeeded_run_keeps_its_estimate_beside_its_actual_time_and_is_measured_once_per_delivery() -> None:
    w, measured = succeeded()
    run = w.run()
    assert run.timings.run_seconds == 1800.0
    assert run.timings.estimated_seconds == pytest.approx(PLAN.estimated_hours * 3600.0, abs=1e-3)
    assert [r.run_id for r in measured] == [run.run_id] and measured[0].state == RunState.SUCCEEDED


def test_the_runs_measurement_has_its_step_time_memory_and_the_rest_as_startup() -> None:
    w, measured = succeeded()
    m = measurement_from_run(measured[0])
    assert m is not None
    assert (m.machine_type, m.accelerator_count, m.nodes) == (PLAN.machine_type, PLAN.accelerator_count, 1)
    assert m.step_seconds == 1.5 and m.samples_per_second == 40.0 and m.peak_memory_gib == 3.0
    assert m.startup_seconds == pytest.approx(1800.0 - 1000 * 1.5)
    assert m.workload == workload_key(w.run().request) and m.image == LANDFALL_IMAGE and m.source == "run"
    (check,) = m.estimates
    assert check.actual_seconds == 1800.0 and check.error == pytest.approx(PLAN.estimated_hours * 2 - 1)
    assert check.from_measured is False


def test_a_step_time_comes_from_throughput_when_the_code_reports_only_that() -> None:
    _, measured = succeeded({"steps": 100, "final": {"samples_per_second": 32.0}})
    m = measurement_from_run(measured[0])
    assert m is not None and m.step_seconds == pytest.approx(PLAN.global_batch_size / 32.0)


def test_without_step_figures_only_the_estimate_beside_the_duration_is_recorded() -> None:
    _, measured = succeeded({})
    m = measurement_from_run(measured[0])
    assert m is not None and (m.step_seconds, m.startup_seconds, m.samples_per_second) == (0.0, 0.0, 0.0)
    assert [e.actual_seconds for e in m.estimates] == [1800.0]
    unfinished = dataclasses.replace(measured[0], timings=dataclasses.replace(measured[0].timings, run_seconds=None))
    assert measurement_from_run(unfinished) is None


def test_the_workload_key_ignores_the_dataset_but_not_the_batch_or_code() -> None:
    base = {"task": "causal-lm", "model": {"preset": "gpt-124m"}, "hyperparameters": {"batch_size": 64}}
    other_data = {**base, "dataset": {"uri": "gs://b/other/", "total_bytes": 5}}
    assert workload_key(base) == workload_key(other_data)
    assert workload_key(base) != workload_key({**base, "hyperparameters": {"batch_size": 32}})
    assert workload_key(base) != workload_key({**base, "trainer": {"image_uri": "us-docker.pkg.dev/p/r/t:1"}})


def test_a_lora_or_declared_figures_make_another_workload_and_unset_ones_change_no_key() -> None:
    base = {"trainer": {"script": "gs://c/t.py"}, "workload": {"parameters": 70_000_000_000}}
    lora = {**base, "workload": {"parameters": 70_000_000_000, "trainable_parameters": 140_000_000}}
    declared = {**base, "workload": {"parameters": 70_000_000_000, "flops_per_sample": 1e15}}
    unset = {**base, "workload": {"parameters": 70_000_000_000, "activation_gib_per_sample": 0}}
    assert len({workload_key(base), workload_key(lora), workload_key(declared)}) == 3
    assert workload_key(unset) == workload_key(base)


def _measurement(run_id: str, at: str, step: float, estimated: float = 100.0) -> Measurement:
    return Measurement(
        workload="wl-1",
        workload_label="causal-lm gpt-124m, batch 64",
        machine_type="n2-standard-8",
        accelerator_type="",
        accelerator_count=0,
        nodes=1,
        image=LANDFALL_IMAGE,
        run_id=run_id,
        source="run",
        measured_at=at,
        step_seconds=step,
        estimates=(EstimateCheck(run_id, estimated, 120.0, False, at),),
    )


def test_merging_keeps_the_newest_figures_and_every_estimate_once_up_to_the_bound() -> None:
    first, second = _measurement("r1", "2026-11-01T00:00:00Z", 2.0), _measurement("r2", "2026-11-02T00:00:00Z", 1.0)
    merged = first.merged(second)
    assert merged.step_seconds == 1.0 and merged.run_id == "r2" and [e.run_id for e in merged.estimates] == ["r1", "r2"]
    assert merged.merged(second) == merged  # a repeated delivery
    late = merged.merged(first)  # an older run's figures delivered late do not replace newer ones
    assert late.step_seconds == 1.0 and late == merged
    many = first
    for i in range(MAX_ESTIMATES + 5):
        many = many.merged(_measurement(f"r{i + 10}", f"2026-11-03T00:00:{i:02d}Z", 1.0))
    assert len(many.estimates) == MAX_ESTIMATES and many.estimates[-1].run_id == f"r{MAX_ESTIMATES + 14}"


def test_a_stored_measurement_round_trips_and_bad_fields_are_named() -> None:
    m = _measurement("r1", "2026-11-01T00:00:00Z", 2.0)
    assert parse_measurement(m.to_document()) == m
    with pytest.raises(SchemaError, match="step_seconds"):
        parse_measurement({**m.to_document(), "step_seconds": -1})
    with pytest.raises(SchemaError, match="source"):
        parse_measurement({**m.to_document(), "source": "guess"})


def test_the_planner_takes_only_figures_measured_with_the_requests_image() -> None:
    m = _measurement("r1", "2026-11-01T00:00:00Z", 2.0)
    other = dataclasses.replace(m, image="us-docker.pkg.dev/p/r/t:1", machine_type="n2-standard-16")
    (figures,) = planner_figures([m, other], LANDFALL_IMAGE)
    assert (figures.machine_type, figures.step_seconds, figures.run_id, figures.source) == (
        "n2-standard-8",
        2.0,
        "r1",
        "run",
    )


def test_a_canarys_figures_are_a_canary_measurement_on_the_runs_plan() -> None:
    w, _ = succeeded()
    m = measurement_from_canary(w.run(), {"step_seconds": 0.8, "peak_memory_bytes": 2**30}, "2026-11-01T00:00:00Z")
    assert m is not None and m.source == "canary" and m.step_seconds == 0.8 and m.peak_memory_gib == 1.0
    assert m.estimates == () and measurement_from_canary(w.run(), {}, "2026-11-01T00:00:00Z") is None


def test_landfall_plan_summary_says_how_far_past_estimates_were() -> None:
    modelled = _measurement("r1", "2026-11-01T00:00:00Z", 2.0, estimated=60.0)
    learned = dataclasses.replace(
        _measurement("r2", "2026-11-02T00:00:00Z", 1.0),
        estimates=(EstimateCheck("r2", 114.0, 120.0, True, "2026-11-02T00:00:00Z"),),
    )
    lines = estimate_summary([modelled.merged(learned)])
    assert lines[0] == "1 past run planned from the model: estimate off by 50% on average (worst: estimate 50% short)"
    assert (
        lines[1] == "1 past run planned from measured figures: estimate off by 5% on average (worst: estimate 5% short)"
    )
    assert "r2: n2-standard-8 estimated 114 s, took 120 s (estimate 5% short; measured)" in lines[-1]
    assert estimate_summary([]) == []


def test_landfall_run_shows_the_estimate_beside_the_actual_time() -> None:
    from landfall.commands.runs import describe

    w, _ = succeeded()
    text = describe(w.run())
    assert f"time      estimated {PLAN.estimated_hours * 3600:.4g} s, actual 1800 s (estimate " in text


def test_an_estimate_error_says_its_direction_in_words() -> None:
    from schemas.measurement import estimate_error_text

    # a local-stack run planned with the modelled 300 s start-up and done in 38 s: the estimate was long, not the run
    assert estimate_error_text((320 - 38) / 38) == "estimate 742% long"
    assert estimate_error_text((114 - 120) / 120) == "estimate 5% short"
    assert estimate_error_text(0.001) == "estimate on time"


def test_the_run_records_its_steps_beside_the_models_and_the_planner_gets_both() -> None:
    from functions.records.measurements import planner_steps

    w, measured = succeeded()
    modelled = planner_steps(w.run().request)
    assert modelled > 0
    m = measurement_from_run(measured[0], modelled)
    assert m is not None and (m.steps, m.modelled_steps) == (1000, modelled)
    (figures,) = planner_figures([m])
    assert (figures.steps, figures.modelled_steps) == (1000, modelled)


def test_a_runs_measurement_keeps_the_models_step_for_its_work_there_and_other_work_learns_from_it() -> None:
    from functions.planning import plan_input_from_request
    from functions.planning.model_step import model_step
    from functions.records.measurements import similar_figures

    w, measured = succeeded()
    m = measurement_from_run(measured[0])
    assert m is not None
    expected = model_step(
        plan_input_from_request(w.run().request), PLAN.machine_type, PLAN.accelerator_count, 1, PLAN.strategy
    )
    assert m.model_step_seconds == pytest.approx(expected.step_seconds, rel=1e-6) and m.model_step_seconds > 0
    assert (m.flops_per_sample, m.family) == (expected.flops_per_sample, expected.family)
    assert parse_measurement(m.to_document()) == m
    # what another workload's plan takes from it: GPU shapes only, same image, not this workload's own
    on_gpu = dataclasses.replace(m, accelerator_type="NVIDIA_L4", accelerator_count=1, machine_type="g2-standard-8")
    taken = similar_figures([on_gpu, m], LANDFALL_IMAGE, "wl-another")
    assert [(f.source, f.model_step_seconds, f.step_seconds) for f in taken] == [
        ("similar", m.model_step_seconds, m.step_seconds)
    ]
    assert similar_figures([on_gpu], LANDFALL_IMAGE, on_gpu.workload) == []
    assert similar_figures([on_gpu], "gcr.io/team/own:1", "wl-another") == []
    assert similar_figures([dataclasses.replace(on_gpu, model_step_seconds=0.0)], LANDFALL_IMAGE, "wl-x") == []


def test_a_measurement_of_infinite_flops_is_refused() -> None:
    _, measured = succeeded()
    m = measurement_from_run(measured[0])
    assert m is not None
    with pytest.raises(SchemaError, match="flops_per_sample"):
        parse_measurement({**m.to_document(), "flops_per_sample": 1e300})


def test_a_layout_round_trips_and_a_document_written_before_layouts_reads_back_the_same() -> None:
    old = _measurement("r1", "2026-11-01T00:00:00Z", 2.0)
    document = old.to_document()
    assert "tensor_parallel" not in document and "pipeline_parallel" not in document
    assert parse_measurement(document) == old and parse_measurement(document).to_document() == document
    laid = dataclasses.replace(old, strategy="fsdp", tensor_parallel=8, pipeline_parallel=4)
    assert (laid.to_document()["tensor_parallel"], laid.to_document()["pipeline_parallel"]) == (8, 4)
    assert parse_measurement(laid.to_document()) == laid
    for name, value, words in (
        ("tensor_parallel", 0, "must be >= 1"),
        ("pipeline_parallel", -2, "must be >= 1"),
        ("tensor_parallel", "8", "expected an integer"),
        ("pipeline_parallel", 4.0, "expected an integer"),
    ):
        with pytest.raises(SchemaError, match=words) as caught:
            parse_measurement({**document, name: value})
        assert caught.value.field == f"measurement.{name}"
    with pytest.raises(SchemaError, match="whole number >= 1"):
        dataclasses.replace(old, pipeline_parallel=0)


def test_a_newer_run_without_a_step_keeps_the_layout_beside_the_step_it_was_measured_under() -> None:
    laid = dataclasses.replace(_measurement("r1", "2026-11-01T00:00:00Z", 2.0), tensor_parallel=8, pipeline_parallel=4)
    without_step = _measurement("r2", "2026-11-02T00:00:00Z", 0.0)
    merged = laid.merged(without_step)
    assert (merged.step_seconds, merged.tensor_parallel, merged.pipeline_parallel) == (2.0, 8, 4)
    relaid = laid.merged(_measurement("r3", "2026-11-03T00:00:00Z", 1.0))
    assert (relaid.step_seconds, relaid.tensor_parallel, relaid.pipeline_parallel) == (1.0, 1, 1)


LAYOUT_REQUEST = {
    "task": "causal-lm",
    "model": {"preset": "gpt-70b"},
    "dataset": {"total_bytes": 2 * 10**9},
    "hyperparameters": {"batch_size": 64},
    "constraints": {"machine_type": "a3-highgpu-8g", "replica_count": 4, "prefer": "fastest"},
}


def test_a_run_and_a_canary_planned_under_a_layout_record_it_with_the_models_step_for_that_layout() -> None:
    from datetime import UTC, datetime

    from functions.planning import plan_input_from_request, plan_request
    from functions.planning.model_step import model_step
    from tests.unit.planning.outcomes import chosen

    inp = plan_input_from_request(LAYOUT_REQUEST)
    plan = chosen(plan_request(inp, now=datetime(2026, 11, 22, 12, tzinfo=UTC)))
    assert (plan.strategy, plan.tensor_parallel, plan.pipeline_parallel) == ("fsdp", 8, 4)
    _, measured = succeeded()
    run = dataclasses.replace(measured[0], request=LAYOUT_REQUEST, plan=plan)
    m = measurement_from_run(run)
    assert m is not None and (m.strategy, m.tensor_parallel, m.pipeline_parallel) == ("fsdp", 8, 4)
    # the model's step for the layout the run ran, not for FSDP alone on the same machines
    assert m.model_step_seconds == pytest.approx(plan.estimated_step_time_seconds, rel=1e-6)
    data_parallel = model_step(inp, plan.machine_type, plan.accelerator_count, plan.replica_count, "fsdp")
    assert data_parallel.step_seconds != pytest.approx(m.model_step_seconds, rel=0.01)
    assert parse_measurement(m.to_document()) == m
    (figures,) = planner_figures([m])
    assert (figures.strategy, figures.tensor_parallel, figures.pipeline_parallel) == ("fsdp", 8, 4)
    canary = measurement_from_canary(run, {"step_seconds": 30.0}, "2026-11-01T00:00:00Z")
    assert canary is not None and (canary.tensor_parallel, canary.pipeline_parallel) == (8, 4)
    assert canary.model_step_seconds == m.model_step_seconds
