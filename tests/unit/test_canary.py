"""The canary before a long run (docs/canary.md) against the fakes: the verdict on its figures, its job,
and a run through canary -> long job, re-planned, failed, cancelled, reconciled and recovered, each asserting the
jobs made and the run record left."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from functions.dispatch import handler as dispatch_handler
from functions.dispatch import job_record
from functions.dispatch.canary_replan import canary_measured
from functions.dispatch.handler import DispatchDeps
from functions.dispatch.job_spec import canary_job, custom_job
from functions.dispatch.outcomes import Outcome as Said
from functions.job_states import JobStateDeps
from functions.planning import plan_input_from_request, plan_request
from functions.reconciler.handler import reconcile_run
from functions.records.canary import canary_due, judge
from functions.settings import SettingsError, settings_from_env
from schemas.canary import (
    CANARY_LABEL,
    CANARY_STEPS,
    CanaryFigures,
    figures_from_metric_lines,
    parse_canary_record,
)
from schemas.job_view import RUN_LABEL
from schemas.measurement import workload_key
from schemas.plan import Plan
from schemas.run_record import RunState, parse_run_record
from schemas.trainer_failure import FAILURE_FILE
from schemas.training_request import TrainingRequest
from tests.fakes.world import NOW, PLAN, REQUEST, RUN_ID, Outcome, World

STEP = PLAN.estimated_step_time_seconds
GIB = 2**30


class CanaryWorld(World):
    """A world whose runs all qualify for a canary (LANDFALL_CANARY_MIN_HOURS=0), whose listener hands ended
    canaries back to the dispatcher, and whose re-plans answer REPLANNED (each call's figures kept in `replans`)."""

    def __init__(self, outcome: Outcome | None = None) -> None:
        super().__init__(outcome)
        self.replans: list[CanaryFigures] = []
        settings = settings_from_env({"GOOGLE_CLOUD_PROJECT": "landfall-local", "LANDFALL_CANARY_MIN_HOURS": "0"})
        self.dispatch_deps = replace(self.dispatch_deps, settings=settings, replan=self._replan)
        self.measured: list[tuple[str, CanaryFigures]] = []
        self.listener_deps = replace(
            self.listener_deps,
            resubmit=lambda run_id: dispatch_handler.resubmit(run_id, self.dispatch_deps),
            measure_canary=lambda run, figures: self.measured.append((run.run_id, figures)),
        )

    def _replan(self, request: TrainingRequest, plan: Plan, figures: CanaryFigures) -> Outcome:
        self.replans.append(figures)
        return Outcome(REPLANNED)


def canary_world() -> CanaryWorld:
    return CanaryWorld()


REPLANNED = replace(PLAN, machine_type="n2-standard-8", estimated_step_time_seconds=STEP * 3)


def canary_dir(w: World) -> str:
    artifacts = w.run().artifacts
    assert artifacts is not None
    return f"{artifacts.output_dir}canary/model/"


def end_canary(
    w: World, figures: CanaryFigures | None, state: str = "JOB_STATE_SUCCEEDED", error: tuple[int, str] | None = None
) -> str:
    name = w.job_name()
    if figures is not None:
        w.objects[f"{canary_dir(w)}canary.json"] = json.dumps(figures.to_dict())
    w.vertex.set_state(name, state, start=NOW, end=NOW + timedelta(minutes=3), error=error)
    return w.job_event(name.rsplit("/", 1)[-1])


def jobs(w: World) -> list[tuple[str, bool]]:
    """Every job made: (name, whether it is a canary)."""
    return [(name, job.labels.get(CANARY_LABEL) == "canary") for name, job in w.vertex.jobs.items()]


# -- the verdict


@pytest.mark.parametrize(
    ("figures", "status", "said"),
    [
        (CanaryFigures(steps=8, step_seconds=STEP * 1.1), "passed", "within 25%"),
        (CanaryFigures(steps=8, step_seconds=STEP * 0.9), "passed", "-10%"),
        (CanaryFigures(steps=8, step_seconds=STEP * 1.3), "replan", "step time off the plan by more than 25%"),
        (CanaryFigures(steps=8, step_seconds=STEP * 0.5), "replan", "-50%"),
        (
            CanaryFigures(steps=8, step_seconds=STEP, peak_memory_bytes=PLAN.memory.total_bytes * 2, memory_kind="gpu"),
            "replan",
            "peak memory off the plan",
        ),
        # a CPU process's resident set is no GPU figure: shown, not compared
        (
            CanaryFigures(
                steps=8, step_seconds=STEP, peak_memory_bytes=PLAN.memory.total_bytes * 9, memory_kind="cpu-rss"
            ),
            "passed",
            "cpu-rss, not compared",
        ),
        (CanaryFigures(steps=3, failed="NCCL all-reduce timed out"), "failed", "NCCL all-reduce timed out"),
        (CanaryFigures(steps=8, step_seconds=STEP, checkpoint_ok=False), "failed", "did not read back"),
    ],
)
def test_judge_names_each_figure_beside_the_plan(figures: CanaryFigures, status: str, said: str) -> None:
    verdict = judge(PLAN, figures, 0.25)
    assert verdict.status == status and said in verdict.message, verdict


def test_the_margin_is_the_setting() -> None:
    slow = CanaryFigures(steps=8, step_seconds=STEP * 1.3)
    assert judge(PLAN, slow, 0.5).status == "passed" and judge(PLAN, slow, 0.25).status == "replan"


def test_a_teams_metric_lines_give_its_figures_without_the_warm_up_step() -> None:
    lines = "\n".join(
        json.dumps(line)
        for line in (
            {"step": 1, "loss": 2.0, "step_seconds": 9.0},
            {"step": 2, "loss": 1.0, "step_seconds": 1.0, "peak_memory_bytes": 5 * GIB},
            {"step": 3, "loss": 0.5, "step_seconds": 3.0, "peak_memory_bytes": 4 * GIB},
            "not a line",
        )
    )
    figures = figures_from_metric_lines(lines + "\n{broken")
    assert (figures.steps, figures.step_seconds, figures.peak_memory_bytes, figures.memory_kind) == (
        3,
        2.0,
        5 * GIB,
        "gpu",
    )


def test_settings_read_the_threshold_and_margin_and_refuse_bad_ones() -> None:
    base = {"GOOGLE_CLOUD_PROJECT": "p"}
    default = settings_from_env(base)
    assert (default.canary_min_hours, default.canary_margin) == (2.0, 0.25)
    set_ = settings_from_env({**base, "LANDFALL_CANARY_MIN_HOURS": "0.5", "LANDFALL_CANARY_MARGIN": "0.1"})
    assert (set_.canary_min_hours, set_.canary_margin) == (0.5, 0.1)
    with pytest.raises(SettingsError, match="LANDFALL_CANARY_MARGIN"):
        settings_from_env({**base, "LANDFALL_CANARY_MARGIN": "a lot"})


def test_only_a_run_planned_longer_than_the_threshold_is_due_a_canary() -> None:
    w = World()
    assert w.deliver() == "submitted"
    run = w.run()
    assert run.plan is not None and canary_due(run, run.plan.estimated_hours - 0.01)
    assert not canary_due(run, run.plan.estimated_hours)
    assert run.canary is None and not any(canary for _, canary in jobs(w))  # the default 2 h: no canary


def _l4(steps: int, startup: float = 120.0) -> Plan:
    """PLAN on one L4: `startup` seconds of start-up, then `steps` steps; its p90 20 % over its estimate."""
    hours = (startup + steps * STEP) / 3600
    return replace(
        PLAN,
        machine_type="g2-standard-4",
        accelerator_type="NVIDIA_L4",
        accelerator_count=1,
        estimated_steps=steps,
        estimated_hours=hours,
        estimated_cost_usd=hours * PLAN.hourly_cost_usd,
        p90_hours=hours * 1.2,
        p90_cost_usd=hours * 1.2 * PLAN.hourly_cost_usd,
        figures_from="model: measured points on L4",
    )


L4_PLAN = _l4(300)


def first_runs_world(plan: Plan) -> World:
    """A world with the first-run canary on (LANDFALL_CANARY_FIRST_RUNS, the default) and `plan` planned."""
    w = World(Outcome(plan, ()))
    settings = settings_from_env({"GOOGLE_CLOUD_PROJECT": "landfall-local"})
    w.dispatch_deps = replace(w.dispatch_deps, settings=settings)
    return w


def test_the_first_run_of_a_workload_on_a_gpu_shape_runs_its_canary_whatever_its_length() -> None:
    assert settings_from_env({"GOOGLE_CLOUD_PROJECT": "p"}).canary_first_runs
    w = first_runs_world(L4_PLAN)
    assert L4_PLAN.estimated_hours < 2.0  # under LANDFALL_CANARY_MIN_HOURS
    assert w.deliver() == "submitted"
    run = w.run()
    [(_, is_canary)] = jobs(w)
    assert is_canary and run.canary is not None and run.canary.status == "running"
    assert run.canary.why.startswith("the first run of this workload on 1 x g2-standard-4 with 1 x NVIDIA_L4")
    assert "(its step time is model: measured points on L4)" in run.canary.why
    assert parse_run_record(w.doc()).canary == run.canary  # `why` stored and read back
    from landfall.words import canary_lines

    assert any(line.strip().startswith("why: the first run of this workload") for line in canary_lines(run))


@pytest.mark.parametrize(
    ("plan", "why"),
    [
        (replace(L4_PLAN, figures_from="measured: run run-1 on this shape"), "measured there"),
        (replace(PLAN, estimated_steps=300), "a CPU machine"),
        (_l4(2, startup=0.0), "shorter than its canary: it would cost more than the run at p90"),
    ],
)
def test_no_first_run_canary_where_the_shape_was_measured_on_cpu_or_where_it_costs_more_than_the_run(
    plan: Plan, why: str
) -> None:
    w = first_runs_world(plan)
    assert w.deliver() == "submitted", why
    assert w.run().canary is None and not any(canary for _, canary in jobs(w)), why


def test_the_first_run_canary_is_a_setting_and_its_cost_is_start_up_and_its_steps() -> None:
    from functions.records.canary import canary_cost_usd, canary_reason

    off = settings_from_env({"GOOGLE_CLOUD_PROJECT": "p", "LANDFALL_CANARY_FIRST_RUNS": "0"})
    assert not off.canary_first_runs
    with pytest.raises(SettingsError, match="LANDFALL_CANARY_FIRST_RUNS='maybe' must be 1 or 0"):
        settings_from_env({"GOOGLE_CLOUD_PROJECT": "p", "LANDFALL_CANARY_FIRST_RUNS": "maybe"})
    w = first_runs_world(L4_PLAN)
    w.dispatch_deps = replace(w.dispatch_deps, settings=off)
    assert w.deliver() == "submitted" and w.run().canary is None
    expected = (120 + CANARY_STEPS * STEP) / 3600 * L4_PLAN.hourly_cost_usd
    assert canary_cost_usd(L4_PLAN) == pytest.approx(expected)
    run = w.run()
    assert canary_reason(replace(run, plan=L4_PLAN), 2.0) == ""  # first_runs off
    long = canary_reason(replace(run, plan=replace(L4_PLAN, estimated_hours=3.0)), 2.0)
    assert long == "the plan's estimate of 3.00 h is over LANDFALL_CANARY_MIN_HOURS (2 h)"


# -- its job


def test_the_canary_job_is_the_runs_job_with_a_step_limit_its_own_folder_and_label() -> None:
    settings = settings_from_env({"GOOGLE_CLOUD_PROJECT": "landfall-local"})
    long, canary = custom_job(REQUEST, PLAN, settings, RUN_ID), canary_job(REQUEST, PLAN, settings, RUN_ID)
    assert canary["labels"] == {**long["labels"], CANARY_LABEL: "canary"} and canary["labels"][RUN_LABEL] == RUN_ID
    assert canary["display_name"] == f"landfall-{RUN_ID}-canary"
    pool, long_pool = canary["job_spec"]["worker_pool_specs"][0], long["job_spec"]["worker_pool_specs"][0]
    assert pool["machine_spec"] == long_pool["machine_spec"]
    assert pool["container_spec"]["image_uri"] == long_pool["container_spec"]["image_uri"]
    assert pool["container_spec"]["args"] == long_pool["container_spec"]["args"]
    env = {e["name"]: e["value"] for e in pool["container_spec"]["env"]}
    assert env["LANDFALL_CANARY"] == "1" and env["LANDFALL_CANARY_STEPS"] == str(CANARY_STEPS)
    assert int(env["LANDFALL_CANARY_BUCKET_BYTES"]) == min(64 * 2**20, 4 * PLAN.model_parameters)
    assert env["LANDFALL_MICRO_BATCH_SIZE"] == str(PLAN.micro_batch_size)
    base = long["job_spec"]["base_output_directory"]["output_uri_prefix"]
    assert canary["job_spec"]["base_output_directory"]["output_uri_prefix"] == f"{base}canary/"
    assert canary["job_spec"]["scheduling"]["timeout"] == {"seconds": 1800}
    assert "LANDFALL_CANARY" not in {e["name"] for e in long_pool["container_spec"]["env"]}


def test_an_image_s_canary_has_its_own_model_and_checkpoint_folders_through_the_mount() -> None:
    settings = settings_from_env({"GOOGLE_CLOUD_PROJECT": "landfall-local"})
    image = replace(REQUEST, trainer=replace(REQUEST.trainer, image_uri="us-docker.pkg.dev/p/r/team:1"))
    canary = canary_job(image, PLAN, settings, RUN_ID)
    env = {e["name"]: e["value"] for e in canary["job_spec"]["worker_pool_specs"][0]["container_spec"]["env"]}
    base = canary["job_spec"]["base_output_directory"]["output_uri_prefix"]  # the canary's: AIP_*_DIR under it
    assert base.endswith("/canary/")
    fuse = "/gcs/" + base.removeprefix("gs://")
    assert (env["LANDFALL_MODEL_DIR"], env["LANDFALL_CHECKPOINT_DIR"]) == (f"{fuse}model/", f"{fuse}checkpoints/")


def test_a_replan_plans_from_the_canarys_figures_as_measured_ones() -> None:
    first = plan_request(plan_input_from_request(REQUEST)).plan
    assert first is not None
    slow = CanaryFigures(steps=8, step_seconds=first.estimated_step_time_seconds * 3, peak_memory_bytes=GIB)
    figure = canary_measured(REQUEST, first, slow, at="2026-11-22T12:00:00Z")
    assert (figure.source, figure.machine_type, figure.nodes, figure.peak_memory_gib) == (
        "canary",
        first.machine_type,
        first.replica_count,
        1.0,
    )
    assert figure.workload == workload_key(REQUEST) and figure.step_seconds == slow.step_seconds
    again = plan_request(plan_input_from_request(REQUEST), measured=[figure]).plan
    assert again is not None
    # a CPU machine of 4 vCPUs is still the cheapest; its step time is now the measured one, and the plan says so
    assert (again.machine_type, again.replica_count) == (first.machine_type, first.replica_count)
    assert again.estimated_step_time_seconds == pytest.approx(slow.step_seconds, rel=0.01)
    assert again.estimated_hours > first.estimated_hours
    assert any(a.startswith("measured: step time") and "from canary" in a for a in again.assumptions)


# -- a run through its canary


def test_a_canary_within_the_plan_is_followed_by_the_long_job_with_its_figures_on_the_run() -> None:
    w = canary_world()
    assert w.deliver() == "submitted"
    run = w.run()
    [(canary_name, is_canary)] = jobs(w)
    assert is_canary and run.state == RunState.SUBMITTED and run.vertex is not None
    assert run.canary is not None and (run.canary.status, run.canary.job_name) == ("running", canary_name)
    assert run.canary.planned_step_seconds == STEP
    assert w.doc()["canary"]["status"] == "running"  # stored, and read back the same
    assert parse_run_record(w.doc()).canary == run.canary

    figures = CanaryFigures(steps=8, step_seconds=STEP * 1.05, peak_memory_bytes=GIB, memory_kind="cpu-rss")
    assert end_canary(w, figures) == "canary-passed:resubmitted:submitted"
    run = w.run()
    assert [c for _, c in jobs(w)] == [True, False]
    assert run.state == RunState.SUBMITTED and run.vertex is not None and run.vertex.job_name == jobs(w)[1][0]
    assert run.canary is not None and run.canary.status == "passed" and run.canary.figures == figures
    assert "within 25%" in run.canary.verdict and run.plan == PLAN
    assert canary_name.rsplit("/", 1)[-1] in (run.submission.job_ids or ())
    assert w.measured == [(RUN_ID, figures)], "what it measured goes to the measurements collection"
    assert [h.state for h in run.history] == [
        "RECEIVED",
        "PLANNED",
        "SUBMITTING",
        "SUBMITTED",
        "SUBMITTING",
        "SUBMITTED",
    ]
    assert "canary passed" in run.history[4].detail
    # the canary's late event changes nothing; a second delivery of the request makes no job
    assert w.job_event(canary_name.rsplit("/", 1)[-1]) == "ignored:earlier-attempt"
    assert w.deliver() == "duplicate:SUBMITTED" and len(w.vertex.jobs) == 2


def test_a_slow_canary_makes_the_run_planned_again_from_its_figures() -> None:
    w = canary_world()
    assert w.deliver() == "submitted"
    slow = CanaryFigures(steps=8, step_seconds=STEP * 3, peak_memory_bytes=GIB, memory_kind="cpu-rss")
    assert end_canary(w, slow) == "canary-replan:resubmitted:submitted"
    run = w.run()
    assert w.replans == [slow]
    assert run.plan is not None and run.plan.machine_type == REPLANNED.machine_type
    assert run.plan.reasons[0].startswith("planned again from the canary's measured figures")
    assert "step time off the plan by more than 25%" in run.plan.reasons[0]
    assert run.canary is not None and run.canary.status == "replanned"
    [_, (long_name, is_canary)] = jobs(w)
    assert (
        not is_canary
        and w.vertex.jobs[long_name].job_spec.worker_pool_specs[0].machine_spec.machine_type == "n2-standard-8"
    )
    assert run.cost.estimated_usd == REPLANNED.estimated_cost_usd


def test_a_replan_that_nothing_fits_fails_the_run_with_no_long_job() -> None:
    w = canary_world()
    w.dispatch_deps = replace(w.dispatch_deps, replan=lambda *_: Outcome(None, rejection="no GPU has 90 GiB"))
    assert w.deliver() == "submitted"
    assert end_canary(w, CanaryFigures(steps=8, step_seconds=STEP * 3)) == (
        "canary-replan:resubmitted:failed:canary-replan"
    )
    run = w.run()
    assert run.state == RunState.FAILED and run.error is not None and "no GPU has 90 GiB" in run.error.message
    assert len(w.vertex.jobs) == 1


def test_a_failing_canary_ends_the_run_with_its_classified_reason_and_no_long_job() -> None:
    w = canary_world()
    assert w.deliver() == "submitted"
    failure = {"kind": "OutOfMemory", "message": "CUDA out of memory at step 2", "exit_code": 4, "step": 2}
    w.objects[f"{canary_dir(w)}{FAILURE_FILE}"] = json.dumps({"schema_version": 1, **failure})
    exited = (3, "The replica workerpool0-0 exited with a non-zero status of 4.")
    assert end_canary(w, None, "JOB_STATE_FAILED", exited) == "canary-failed:failed"
    run = w.run()
    assert run.state == RunState.FAILED and len(w.vertex.jobs) == 1
    assert run.error is not None and (run.error.code, run.error.reason) == ("canary-failed", "out-of-memory")
    assert "CUDA out of memory at step 2" in run.error.message
    assert run.canary is not None and run.canary.status == "failed" and "out-of-memory" in run.canary.verdict
    # the canary's event again (a redelivery, the reconciler): its end is recorded, the run's error stays the canary's
    before = w.doc()
    assert w.job_event(w.job_name().rsplit("/", 1)[-1]) == "ignored:canary-failed"
    assert w.doc() == before


def test_a_canary_that_left_no_figures_fails_the_run() -> None:
    w = canary_world()
    assert w.deliver() == "submitted"
    assert end_canary(w, None) == "canary-failed:failed"
    run = w.run()
    assert run.state == RunState.FAILED and run.error is not None and run.error.code == "canary-failed"
    assert "left no figures" in run.error.message and len(w.vertex.jobs) == 1


def test_a_report_that_failed_fails_the_run() -> None:
    w = canary_world()
    assert w.deliver() == "submitted"
    assert end_canary(w, CanaryFigures(steps=8, step_seconds=STEP, checkpoint_ok=False)) == "canary-failed:failed"
    run = w.run()
    assert run.error is not None and run.error.reason == "platform" and len(w.vertex.jobs) == 1


def test_cancelling_a_run_in_its_canary_cancels_the_canary_and_makes_no_long_job() -> None:
    w = canary_world()
    assert w.deliver() == "submitted"
    assert w.vertex.cancel(w.job_name())
    name = w.job_name()
    assert w.job_event(name.rsplit("/", 1)[-1]) == "canary-cancelled:cancelled"
    run = w.run()
    assert run.state == RunState.CANCELLED and run.canary is not None and run.canary.status == "cancelled"
    assert len(w.vertex.jobs) == 1


def test_the_reconciler_finishes_a_canary_whose_event_was_missed() -> None:
    w = canary_world()
    assert w.deliver() == "submitted"
    w.objects[f"{canary_dir(w)}canary.json"] = json.dumps(CanaryFigures(steps=8, step_seconds=STEP).to_dict())
    w.vertex.set_state(w.job_name(), "JOB_STATE_SUCCEEDED", start=NOW, end=NOW + timedelta(minutes=1))
    w.clock.now = NOW + timedelta(minutes=10)  # past the grace the reconciler leaves to the listener
    assert reconcile_run(w.run(), w.reconciler_deps()) == "canary-passed:resubmitted:submitted"
    run = w.run()
    assert run.canary is not None and run.canary.status == "passed"
    assert [c for _, c in jobs(w)] == [True, False]


def test_a_delivery_that_died_after_creating_the_canary_is_recovered_without_a_second_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    w = canary_world()
    real = job_record.record_submitted
    calls = []

    def dies_once(*args: Any, **kwargs: Any) -> Said:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the delivery died after CreateCustomJob")
        return real(*args, **kwargs)

    monkeypatch.setattr(job_record, "record_submitted", dies_once)
    with pytest.raises(RuntimeError):
        w.deliver()
    w.clock.now = NOW + timedelta(seconds=w.dispatch_deps.settings.submission_lease_seconds + 1)
    assert w.deliver(message_id="m-2") == "recovered"
    [(name, is_canary)] = jobs(w)
    run = w.run()
    assert is_canary and run.canary is not None and run.canary.job_name == name and run.canary.status == "running"


def test_the_record_field_round_trips_and_refuses_an_unknown_status() -> None:
    w = canary_world()
    assert w.deliver() == "submitted"
    doc = w.doc()["canary"]
    assert parse_canary_record(doc).to_dict() == doc
    with pytest.raises(Exception, match="status"):
        parse_canary_record({**doc, "status": "maybe"})


def test_deps_default_margin_is_the_settings_default() -> None:
    assert JobStateDeps.canary_margin == settings_from_env({"GOOGLE_CLOUD_PROJECT": "p"}).canary_margin
    assert DispatchDeps.replan is None


# -- what people see


def test_landfall_run_and_watch_show_the_canary_as_a_step_of_the_run() -> None:
    import io

    from landfall.commands.runs import describe
    from landfall.commands.watch import Watcher

    w = canary_world()
    assert w.deliver() == "submitted"
    figures = CanaryFigures(
        steps=8,
        step_seconds=STEP,
        peak_memory_bytes=GIB,
        memory_kind="cpu-rss",
        allreduce_bytes=4 * PLAN.model_parameters,
        allreduce_gbps=1.5,
        processes=1,
        checkpoint_ok=True,
    )
    end_canary(w, figures)
    text = describe(w.run())
    canary_id = jobs(w)[0][0].rsplit("/", 1)[-1]
    assert f"canary    passed: job {canary_id} on {PLAN.machine_type} in {PLAN.region}" in text
    assert "within 25% of the plan" in text
    assert "measured: 8 steps" in text and "all-reduce 1.5 GB/s x 1" in text and "checkpoint read back" in text
    out = io.StringIO()
    Watcher(out).show(w.run(), None)
    shown = out.getvalue()
    assert f"SUBMITTED  canary job {jobs(w)[0][0]}" in shown and "SUBMITTING canary passed: within 25%" in shown


def test_a_canary_event_read_before_the_hand_back_changes_nothing_after_it() -> None:
    """Found by the e2e test: the canary's RUNNING event, handled as the canary ended, moved the run on with no job."""
    from functions.job_states import record_job_state

    w = canary_world()
    assert w.deliver() == "submitted"
    running = w.vertex.set_state(w.job_name(), "JOB_STATE_RUNNING", start=NOW)
    stale = w.run()  # what a delivery of that event read
    assert end_canary(w, CanaryFigures(steps=8, step_seconds=STEP)) == "canary-passed:resubmitted:submitted"
    before = w.doc()
    assert record_job_state(stale, running, w.listener_deps) == "unchanged:RUNNING"
    assert w.doc() == before and w.run().state == RunState.SUBMITTED


def test_a_canary_that_ends_for_capacity_moves_the_run_to_its_next_plan_with_a_canary_of_its_own() -> None:
    w = canary_world()
    assert w.deliver() == "submitted"
    first = w.job_name()
    stockout = (8, "Resources are insufficient in region: us-central1. Please try a different region.")
    said = end_canary(w, None, "JOB_STATE_FAILED", stockout)
    assert said == "resubmitted:submitted", said
    run = w.run()
    assert [c for _, c in jobs(w)] == [True, True], "the next plan's job is a canary too"
    assert run.canary is not None and run.canary.status == "running" and run.canary.job_name != first
    assert run.canary.region == "europe-west4" and run.state == RunState.SUBMITTED
    assert [(j.job_name, j.reason) for j in run.submission.jobs or ()] == [(first, "stockout")]
