"""The checkpoint interval from the plan: it follows the planned step time and the Spot risk, stretches for models
whose checkpoints are slow to write, reaches the built-in trainer (--checkpoint-every) and a team's code
(LANDFALL_CHECKPOINT_EVERY_STEPS), and a request's own hyperparameters.checkpoint_every_steps wins."""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from functions.dispatch.job_spec import contract_env, trainer_args
from functions.planning import PlanInput, plan_input_from_request, plan_request
from functions.planning.catalog import load_catalog
from functions.planning.checkpoints import checkpoint_interval
from schemas.training_request import parse_training_request
from tests.unit.planning.outcomes import chosen
from trainer.config import parse_args

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
RULES = load_catalog().assumptions.checkpoints
GOLDEN = Path(__file__).parents[1] / "golden" / "custom_jobs"
SMALL = 124_000_000
"""Parameters of a model whose checkpoint writes in seconds (the write-time floor does not bind)."""


def test_the_interval_keeps_the_work_lost_under_the_target_and_is_tighter_on_spot():
    for spot, minutes in ((False, RULES.max_lost_minutes), (True, RULES.spot_max_lost_minutes)):
        every = checkpoint_interval(0.5, 10**7, SMALL, spot, RULES)
        assert every.every_steps == math.floor(minutes * 60 / 0.5)
        assert f"at most {minutes:g} min of work lost" in every.reason
    assert RULES.spot_max_lost_minutes < RULES.max_lost_minutes
    assert (
        checkpoint_interval(0.5, 10**7, SMALL, True, RULES).every_steps
        < checkpoint_interval(0.5, 10**7, SMALL, False, RULES).every_steps
    )


@pytest.mark.parametrize("step", [0.01, 0.3, 2.0, 45.0])
def test_the_interval_follows_the_step_time(step: float):
    every = checkpoint_interval(step, 10**9, SMALL, False, RULES).every_steps
    slower = checkpoint_interval(2 * step, 10**9, SMALL, False, RULES).every_steps
    assert every * step <= RULES.max_lost_minutes * 60 < (every + 1) * step
    assert abs(2 * slower - every) <= 2


def test_a_slow_checkpoint_write_stretches_the_interval_and_says_why():
    parameters = 70_000_000_000
    write = parameters * RULES.bytes_per_parameter / (RULES.write_gbytes_per_second * 1e9)
    every = checkpoint_interval(10.0, 10**6, parameters, True, RULES)
    assert every.every_steps * 10.0 >= write / RULES.max_write_overhead_fraction - 10.0
    assert every.every_steps * 10.0 > RULES.spot_max_lost_minutes * 60
    assert "stretched because writing one" in every.reason


def test_a_run_shorter_than_the_interval_checkpoints_only_on_sigterm():
    """No pointless checkpoint at the end of a short run (its model is saved anyway); the interval stays one of time,
    so a run that proves longer than estimated still checkpoints on schedule."""
    every = checkpoint_interval(0.1, 50, SMALL, False, RULES)
    assert every.every_steps == math.floor(RULES.max_lost_minutes * 60 / 0.1) > 50
    assert "the planned run (50 steps) is shorter than that: it checkpoints only on SIGTERM" in every.reason
    assert checkpoint_interval(1e6, 10, SMALL, False, RULES).every_steps == 1


def test_a_multi_day_plan_checkpoints_minutes_apart_not_hours():
    """The trial's complaint: the trainer's default of 1,000 steps put checkpoints hours apart on multi-day plans."""
    plan = chosen(
        plan_request(
            PlanInput(task="causal-lm", preset="gpt-1.3b", dataset_bytes=5 * 10**9, prefer="cheapest"), now=NOW
        )
    )
    assert plan.estimated_hours > 48 and 1000 * plan.estimated_step_time_seconds > 3600, "1,000 steps: over an hour"
    target = RULES.spot_max_lost_minutes if plan.spot else RULES.max_lost_minutes
    assert 1 <= plan.checkpoint_every_steps * plan.estimated_step_time_seconds <= target * 60
    assert plan.reasons[-1].startswith("checkpoint every ") and ", on the clock (~" in plan.reasons[-1]
    assert f"~{plan.checkpoint_every_steps:,} steps at the planned" in plan.reasons[-1]
    assert plan.checkpoint_every_seconds == target * 60  # the clock keeps the target, whatever the step time proves
    on_demand = chosen(
        plan_request(
            PlanInput(task="causal-lm", preset="gpt-1.3b", dataset_bytes=5 * 10**9, prefer="cheapest", spot="never"),
            now=NOW,
        )
    )
    assert plan.spot and not on_demand.spot
    assert (
        plan.checkpoint_every_steps * plan.estimated_step_time_seconds
        < on_demand.checkpoint_every_steps * on_demand.estimated_step_time_seconds
    )
    assert plan.checkpoint_every_seconds < on_demand.checkpoint_every_seconds == RULES.max_lost_minutes * 60


def _request(case: str, **hyper: int):
    raw = json.loads((GOLDEN / f"{case}.request.json").read_text())
    raw["hyperparameters"].update(hyper)
    request = parse_training_request(raw)
    return request, chosen(plan_request(plan_input_from_request(request), now=NOW))


def test_the_plan_s_interval_reaches_the_trainer_and_a_team_s_code():
    request, plan = _request("spot")
    assert plan.checkpoint_every_steps > 0 and plan.checkpoint_every_seconds > 0
    config = parse_args(trainer_args(request, plan))
    assert (config.checkpoint_every_seconds, config.checkpoint_every) == (plan.checkpoint_every_seconds, None)
    env = contract_env(request, plan, request.run_id)
    assert env["LANDFALL_CHECKPOINT_EVERY_STEPS"] == str(plan.checkpoint_every_steps)
    assert env["LANDFALL_CHECKPOINT_EVERY_SECONDS"] == str(plan.checkpoint_every_seconds)
    own, own_plan = _request("own_image")
    assert contract_env(own, own_plan, own.run_id)["LANDFALL_CHECKPOINT_EVERY_STEPS"] == str(
        own_plan.checkpoint_every_steps
    )


def test_the_request_s_own_checkpoint_interval_wins():
    request, plan = _request("spot", checkpoint_every_steps=777)
    assert plan.checkpoint_every_steps != 777
    config = parse_args(trainer_args(request, plan))
    assert (config.checkpoint_every, config.checkpoint_every_seconds) == (777, 0)  # the request counts in steps
    assert contract_env(request, plan, request.run_id)["LANDFALL_CHECKPOINT_EVERY_STEPS"] == "777"
    assert "LANDFALL_CHECKPOINT_EVERY_SECONDS" not in contract_env(request, plan, request.run_id)
    # a plan recorded before either field existed
    unplanned = dataclasses.replace(plan, checkpoint_every_steps=0, checkpoint_every_seconds=0)
    plain, _ = _request("spot")
    assert "LANDFALL_CHECKPOINT_EVERY_STEPS" not in contract_env(plain, unplanned, plain.run_id)
    assert not any(a.startswith("--checkpoint-every") for a in trainer_args(plain, unplanned))
    assert parse_args(trainer_args(plain, unplanned)).checkpoint_every == 1000  # the trainer's default


def test_a_spot_plan_whose_checkpoint_outlasts_the_preemption_notice_says_so() -> None:
    rules = RULES
    big = checkpoint_interval(1.0, 100_000, 7_000_000_000, True, rules)  # 84 GB at 0.5 GB/s: ~168 s
    assert "takes longer than the 30 s a Spot preemption's notice gives" in big.reason
    assert "none is saved on the notice" in big.reason
    small = checkpoint_interval(1.0, 100_000, 124_000_000, True, rules)  # 1.5 GB: ~3 s
    on_demand = checkpoint_interval(1.0, 100_000, 7_000_000_000, False, rules)
    assert "notice" not in small.reason and "notice" not in on_demand.reason
