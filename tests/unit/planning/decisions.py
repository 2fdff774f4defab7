"""Planner decisions over a fixed set of generated requests, kept as a golden file so that a change made for speed
cannot change a decision unnoticed (tests/unit/planning/test_planner_decisions.py).

Each request's decision is its whole outcome: the Plan record (alternatives, assumptions and job choices
included), the fallback Plans, the rejection text, the objective and the best-ranked candidate rows, written
as canonical JSON and kept as a SHA-256 digest beside a readable summary of the choice.

Regenerate only after a deliberate change to the planner's model, catalog or wording, with:

    .venv/bin/python -m tests.unit.planning.decisions
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from functions.planning import PlanInput, PlanInputError, PlanOutcome, plan_request
from functions.planning.catalog import load_catalog

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
GOLDEN = Path(__file__).parents[1] / "golden" / "planner" / "decisions.json"
COUNT = 160
CANDIDATES = 60
"""Candidate rows kept per request (the CLI shows the best-ranked; all 664 would make the test slow)."""
SEED = 14
MODELS = (
    ("tabular-classification", "mlp-small"),
    ("tabular-classification", "mlp-medium"),
    ("tabular-regression", "mlp-large"),
    ("causal-lm", "gpt-tiny"),
    ("causal-lm", "gpt-124m"),
    ("causal-lm", "gpt-350m"),
    ("causal-lm", "gpt-1.3b"),
    ("causal-lm", "gpt-7b"),
    ("causal-lm", "gpt-70b"),
)
GPUS = (
    "NVIDIA_TESLA_T4",
    "NVIDIA_TESLA_V100",
    "NVIDIA_L4",
    "NVIDIA_TESLA_A100",
    "NVIDIA_A100_80GB",
    "NVIDIA_H100_80GB",
    "NVIDIA_H100_MEGA_80GB",
    "NVIDIA_H200_141GB",
    "NVIDIA_B200",
    "NVIDIA_TESLA_P100",
)


def generated_requests(count: int = COUNT, seed: int = SEED) -> list[PlanInput]:
    """Requests over every preset, batch sizes, deadlines, budgets, region and GPU subsets, GPU caps, Spot and
    precision policies, pins' absence and fp32: planned, fallen back and rejected alike."""
    rng = random.Random(seed)
    regions = load_catalog().regions
    out = []
    for _ in range(count):
        task, preset = rng.choice(MODELS)
        out.append(
            PlanInput(
                task=task,
                preset=preset,
                dataset_bytes=int(10 ** rng.uniform(3, 12)),
                epochs=rng.randint(1, 5),
                batch_size=rng.choice([1, 8, 32, 48, 64, 128, 256, 1024]),
                max_steps=rng.choice([0, 0, 0, 1000, 20000]),
                deadline=rng.choice([None, None, NOW + timedelta(hours=10 ** rng.uniform(-1, 2.5))]),
                budget_usd=rng.choice([0.0, 0.0, 0.0, 10 ** rng.uniform(0, 4)]),
                regions=tuple(rng.sample(regions, rng.choice([0, 0, 1, 2, 3]))),
                gpu_allowlist=tuple(rng.sample(GPUS, rng.choice([0, 0, 0, 1, 2, 3]))),
                max_gpus=rng.choice([0, 0, 1, 4, 8, 16, 64]),
                spot=rng.choice(["never", "allowed", "allowed", "required"]),
                precision=rng.choice(["auto", "auto", "auto", "fp32"]),
                checkpointing=rng.random() > 0.1,
                flex_start=rng.choice(["never", "never", "allowed"]),
                prefer=rng.choice(["", "", "", "cheapest", "fastest", "10", "200"]),
            )
        )
    return out


def _rounded(value: Any) -> Any:
    """Floats to 6 significant digits: numpy's vectorised sums differ in their last bits between processors (SIMD
    widths, AVX-512 or not), and a digest of every bit would change with the machine, not with the planner. At 9
    digits 13 of 160 digests still differed between two processors (relative differences near 1e-13 over hundreds
    of floats per outcome); at 6 a flip is about a thousand times rarer than that."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    return value


def outcome_document(outcome: PlanOutcome) -> dict[str, Any]:
    document = {
        "plan": outcome.plan.to_dict() if outcome.plan else None,
        "fallbacks": [p.to_dict() for p in outcome.fallbacks],
        "rejection": outcome.rejection,
        "objective": outcome.objective,
        "candidates": [dataclasses.asdict(c) for c in outcome.candidates[:CANDIDATES]],
    }
    rounded: dict[str, Any] = _rounded(document)
    return rounded


def decision(request: PlanInput) -> dict[str, Any]:
    """The summary and digest of one request's outcome (or of the error it raises)."""
    try:
        outcome = plan_request(request, now=NOW)
    except PlanInputError as exc:
        return {"error": str(exc)}
    document = json.dumps(outcome_document(outcome), sort_keys=True, separators=(",", ":"))
    plan = outcome.plan
    chosen = (
        f"{plan.replica_count} x {plan.machine_type} {plan.accelerator_type or 'cpu'} x{plan.accelerator_count}"
        f" {plan.strategy}{f' tp{plan.tensor_parallel}' if plan.tensor_parallel > 1 else ''}"
        f"{f' pp{plan.pipeline_parallel}' if plan.pipeline_parallel > 1 else ''}"
        f" {plan.region}{' spot' if plan.spot else ''} ${plan.estimated_cost_usd}"
        if plan
        else "rejected"
    )
    return {
        "chosen": chosen,
        "fallbacks": len(outcome.fallbacks),
        "sha256": hashlib.sha256(document.encode()).hexdigest(),
    }


def decisions() -> list[dict[str, Any]]:
    return [decision(r) for r in generated_requests()]


def main() -> None:
    GOLDEN.write_text(
        json.dumps({"count": COUNT, "seed": SEED, "now": NOW.isoformat(), "decisions": decisions()}, indent=1) + "\n"
    )
    print(f"wrote {GOLDEN}")


if __name__ == "__main__":
    main()
