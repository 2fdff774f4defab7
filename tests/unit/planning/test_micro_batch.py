"""The planner's micro-batch is the one that trains the most samples per second within memory: among the divisors of
a process's share that fit, a smaller one never has a higher MFU under the time model (fitted to the measured
points) and always has more micro-steps, each paying the fixed overhead; the plan says so with its figures."""

from __future__ import annotations

import numpy as np

from functions.planning import PlanInputError, plan_request
from functions.planning.search import Evaluation, share_divisors
from functions.planning.space import DATA_VARIANTS
from functions.planning.throughput import mfu_at
from tests.unit.planning.decisions import NOW, generated_requests


def _evaluations(count: int) -> list[Evaluation]:
    out = []
    for request in generated_requests()[:count]:
        try:
            outcome = plan_request(request, now=NOW)
        except PlanInputError:
            continue
        out.append(outcome.evaluation)
    return out


def _mfu(ev: Evaluation, micro: np.ndarray) -> np.ndarray:
    """[config] the time model's MFU at micro[config] samples per micro-step."""
    space = ev.space
    log_work = np.log(ev.workload.flops_per_sample * np.maximum(micro, 1))[None, :]
    out: np.ndarray = mfu_at(space.log_work, space.mfu_base, space.mfu_slopes, log_work)[0]
    return out


def test_no_smaller_divisor_that_fits_would_train_faster() -> None:
    checked = 0
    for ev in _evaluations(40):
        divisors = share_divisors(ev.workload.global_batch, ev.space.world)  # [k, config], inf padded
        # the data-parallel variants: a pipeline's micro-batch is chosen for its bubble (test_layouts.py)
        for v in range(min(ev.variants, DATA_VARIANTS)):
            micro = ev.micro_batch[:, v]
            chosen = _mfu(ev, micro)
            assert np.allclose(chosen, ev.mfu[:, v]), "the check computes the planner's own MFU"
            for row in divisors:
                smaller = np.isfinite(row) & (row < micro)
                alternative = _mfu(ev, np.where(smaller, row, 1).astype(np.int64))
                assert np.all(alternative[smaller] <= chosen[smaller] * (1 + 1e-12))
                checked += int(smaller.sum())
    assert checked > 1000, "the request set must hold candidates with smaller divisors to compare"


def test_the_plan_says_why_its_micro_batch() -> None:
    said = 0
    for request in generated_requests()[:40]:
        try:
            plan = plan_request(request, now=NOW).plan
        except PlanInputError:
            continue
        if plan is None:
            continue
        reasons = [r for r in plan.reasons if r.startswith("micro-batch ")]
        assert len(reasons) == 1, plan.reasons
        if plan.pipeline_parallel > 1:
            assert "micro-batches per pipeline step" in reasons[0]
            continue
        assert f"micro-batch {plan.micro_batch_size}: the largest divisor of the share that fits" in reasons[0]
        said += 1
    assert said >= 5
