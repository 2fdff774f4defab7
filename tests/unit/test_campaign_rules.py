"""The fault campaign's pure parts (tests/campaign): the draw is reproducible from the seed, faults become the
right settings, and the invariants catch what they name."""

from __future__ import annotations

from typing import Any

from functions.fault_points import FAULT_POINTS, parse
from tests.campaign.faults import KINDS, Fault, draw, fault_points_env, vertex_plan
from tests.campaign.invariants import TrialFacts, check, delivery_violations, settled

URI = "gs://landfall-landing/datasets/campaign-s1-t0001/"
JOB_A = "projects/p/locations/us-central1/customJobs/1"
JOB_B = "projects/p/locations/us-central1/customJobs/2"


def test_the_draw_depends_only_on_seed_and_trial_and_reaches_every_kind() -> None:
    assert [draw(7, n) for n in range(50)] == [draw(7, n) for n in range(50)]
    assert [draw(7, n) for n in range(50)] != [draw(8, n) for n in range(50)]
    assert {draw(1, n).kind for n in range(400)} == set(KINDS)
    points = {draw(1, n).target for n in range(2000) if draw(1, n).kind.endswith("_point")}
    assert points == set(FAULT_POINTS)


def test_fault_points_go_to_the_service_that_runs_them_as_a_valid_setting() -> None:
    env = fault_points_env(
        [
            Fault("crash_point", "dispatch.after_claim"),
            Fault("raise_point", "ingest.after_read"),
            Fault("crash_point", "dispatch.after_plan"),
            Fault("none"),
        ]
    )
    assert env == {
        "dispatch": "dispatch.after_claim=crash@1,dispatch.after_plan=crash@1",
        "on_object_finalized": "ingest.after_read=raise@0.5",
    }
    for spec in env.values():
        assert parse(spec)


def test_vertex_faults_become_one_emulator_plan() -> None:
    assert vertex_plan([Fault("none")]) == {}
    plan = vertex_plan(
        [
            Fault("vertex_quota"),
            Fault("vertex_unavailable", count=2),
            Fault("vertex_unavailable", count=3),
            Fault("vertex_stockout"),
        ]
    )
    assert plan == {"quota_exhausted": [{}], "stockout": [{}], "unavailable_calls": 5}


def _run(state: str = "SUCCEEDED", **extra: Any) -> dict[str, Any]:
    return {
        "run_id": "run-1",
        "state": state,
        "vertex": {"job_name": JOB_A},
        "submission": {"attempts": [{"outcome": "created"}]},
        **extra,
    }


def _facts(
    runs: list[dict[str, Any]], jobs: dict[str, str] | None = None, status: str = "REQUESTED", versions: int = 1
) -> TrialFacts:
    return TrialFacts(
        URI,
        {"status": status},
        [{"status": "PUBLISHED", "run_id": "run-1"}] * versions,
        runs,
        {"run-1": {JOB_A: "JOB_STATE_SUCCEEDED"} if jobs is None else jobs},
    )


def test_a_clean_trial_has_no_violation() -> None:
    assert settled(_facts([_run()])) and check(_facts([_run()])) == []


def test_a_second_run_for_one_version_is_caught() -> None:
    found = check(_facts([_run(), {**_run(), "run_id": "run-2", "vertex": None}]))
    assert [v.invariant for v in found] == ["one-run-per-version"]


def test_a_run_left_submitting_or_waiting_without_a_reason_is_caught() -> None:
    assert not settled(_facts([_run("SUBMITTING")]))
    waiting = _run("WAITING", submission={"attempts": [], "waiting": {"reason": "", "retry_at": "x"}})
    assert [v.invariant for v in check(_facts([waiting], jobs={}))] == ["run-settles"]
    explained = _run("WAITING", submission={"attempts": [], "waiting": {"reason": "quota", "retry_at": "x"}})
    assert settled(_facts([explained], jobs={})) and check(_facts([explained], jobs={})) == []


def test_a_job_the_run_does_not_know_is_caught_and_a_superseded_one_is_known() -> None:
    jobs = {JOB_A: "JOB_STATE_SUCCEEDED", JOB_B: "JOB_STATE_SUCCEEDED"}
    assert {v.invariant for v in check(_facts([_run()], jobs))} == {"one-job-per-attempt"}
    known = _run(submission={"attempts": [{"outcome": "created"}], "jobs": [{"job_name": JOB_B}]})
    assert check(_facts([known], {**jobs, JOB_B: "JOB_STATE_CANCELLED"})) == []


def test_a_run_that_ended_unlike_its_job_is_caught() -> None:
    found = check(_facts([_run("SUCCEEDED")], {JOB_A: "JOB_STATE_RUNNING"}))
    assert [v.invariant for v in found] == ["run-settles"]


def test_a_dead_lettered_message_is_caught() -> None:
    log = (
        "2026-11-23T10:00:00.000Z dispatch: message 12 attempt 3 of 15 failed: HTTP 500; next attempt in 4s\n"
        "2026-11-23T10:05:00.000Z dispatch: message 12 attempt 15 of 15 failed: HTTP 500; dead-lettered\n"
    )
    (violation,) = delivery_violations(log)
    assert violation.invariant == "no-endless-redelivery" and "message 12" in violation.detail


def _trained(*attempts: tuple[int, int]) -> list[str]:
    """The checkpointing trainer's lines for attempts that each resumed from a step and trained to another."""
    import json

    from tests.campaign.checkpoint_trainer import BATCH, CHECKPOINT_EVERY, START, STEP

    lines = []
    for resumed, reached in attempts:
        lines.append(
            json.dumps(
                {"message": START, "resumed_from_step": resumed, "steps": 12, "checkpoint_every": CHECKPOINT_EVERY}
            )
        )
        lines += [
            json.dumps({"message": STEP, "step": k, "first_sample": (k - 1) * BATCH, "end_sample": k * BATCH})
            for k in range(resumed + 1, reached + 1)
        ]
    return ["launcher starting", *lines]


def test_a_resume_from_the_newest_checkpoint_keeps_progress_and_trains_each_sample_once() -> None:
    from tests.campaign.invariants import training_violations

    succeeded = {"run_id": "r", "state": "SUCCEEDED"}
    assert training_violations(succeeded, _trained((0, 12))) == []
    assert training_violations(succeeded, _trained((0, 7), (4, 12))) == []  # killed 3 steps past its checkpoint
    assert training_violations(succeeded, _trained((0, 0), (0, 5), (5, 12))) == []  # a SIGTERM checkpoint at 5
    assert training_violations({"run_id": "r", "state": "FAILED"}, _trained((0, 6))) == []


def test_lost_progress_a_repeated_sample_and_a_short_model_are_caught() -> None:
    from tests.campaign.invariants import training_violations

    succeeded = {"run_id": "r", "state": "SUCCEEDED"}
    lost = training_violations(succeeded, _trained((0, 10), (4, 12)))  # 6 steps lost: past one interval of 4
    assert [v.invariant for v in lost] == ["progress-kept"]
    twice = _trained((0, 8), (8, 12))
    twice.insert(12, twice[11])  # step 8 logged again: its samples trained twice
    assert "no-sample-twice" in [v.invariant for v in training_violations(succeeded, twice)]
    assert [v.invariant for v in training_violations(succeeded, _trained((0, 8), (9, 12)))] == [
        "no-sample-twice",  # a resume from a step never trained
        "no-sample-twice",  # step 10 after step 8: samples skipped
        "no-sample-twice",  # and the model does not hold 1-12
    ]
    assert [v.invariant for v in training_violations(succeeded, _trained((0, 11)))] == ["no-sample-twice"]


def test_the_resumes_are_counted_with_the_steps_each_lost() -> None:
    from tests.campaign.invariants import resumes

    assert resumes(_trained((0, 12))) == []
    assert resumes(_trained((0, 7), (4, 5), (5, 12))) == [(4, 3), (5, 0)]  # each attempt's loss counted once
