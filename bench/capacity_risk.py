"""Capacity risk benchmark: what a capacity history costs a plan (functions/planning/risk.py).

    .venv/bin/python bench/capacity_risk.py [--events 500] [--plans 20] [--seed 7]

Plans two requests (the default route's tabular request and a gpt-1.3b language model, unpinned: every shape, every
region) without a history and with one of `--events` synthetic capacity events (the dispatcher reads the newest 500),
and times building that history from the events (the dispatcher does it once per read, a minute per instance).
Figures only, no target: the planner's own target is bench/planner_bench.py's.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from functions.planning import PlanInput, PlannerConfig, plan_input_from_request, plan_request
from functions.planning.risk import CapacityHistory, CapacityObservation
from schemas.training_request import parse_training_request

EXAMPLE = Path(__file__).resolve().parents[1] / "schemas" / "examples" / "training_request.json"
KINDS = ("NVIDIA_L4", "NVIDIA_TESLA_T4", "NVIDIA_H100_80GB", "NVIDIA_B200", "NVIDIA_A100_80GB", "")
REGIONS = ("us-central1", "us-east4", "europe-west4", "asia-southeast1", "us-west1")


def _events(n: int, seed: int) -> list[CapacityObservation]:
    rng = random.Random(seed)
    return [
        CapacityObservation(
            rng.choice(KINDS),
            rng.choice(REGIONS),
            rng.choice(("spot", "on_demand")),
            nodes=rng.choice((1, 2)),
            refused=rng.random() < 0.2,
            lost_seconds=300.0,
            running_hours=rng.random() * 3,
            preempted=rng.random() < 0.1,
        )
        for _ in range(n)
    ]


def _median_ms(run: Callable[[], object], times: int) -> float:
    run()  # warm: the candidate space is built once per process
    taken = []
    for _ in range(times):
        started = time.perf_counter()
        run()
        taken.append((time.perf_counter() - started) * 1000)
    return statistics.median(taken)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=500, help="capacity events in the history (default 500)")
    parser.add_argument("--plans", type=int, default=20, help="plans timed per case (default 20)")
    parser.add_argument("--seed", type=int, default=7)
    ns = parser.parse_args()
    events = _events(ns.events, ns.seed)
    history = CapacityHistory.of(events)
    requests = {
        "tabular (the example request)": plan_input_from_request(parse_training_request(EXAMPLE.read_text())),
        "gpt-1.3b, 2 GB": PlanInput(task="causal-lm", preset="gpt-1.3b", dataset_bytes=2 * 10**9, batch_size=64),
    }
    print(f"capacity risk: {ns.events} events ({len(history.shapes)} GPU kind x region x mode), median of {ns.plans}")
    for name, inp in requests.items():
        bare = _median_ms(partial(plan_request, inp, PlannerConfig()), ns.plans)
        risky = _median_ms(partial(plan_request, inp, PlannerConfig(capacity=history)), ns.plans)
        print(f"  {name:32s} no history {bare:6.2f} ms   with history {risky:6.2f} ms   (+{risky - bare:.2f} ms)")
    built = _median_ms(lambda: CapacityHistory.of(events), ns.plans)
    print(f"  the history from {ns.events} events: {built:.2f} ms (once per read of the newest events)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
