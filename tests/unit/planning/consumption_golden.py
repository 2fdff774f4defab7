"""Plans over the whole catalog, kept as a golden file: for every preset, every GPU kind (an allowlist of one) and
no allowlist, Spot allowed or forbidden, Flex-start allowed or not, the machine, node count, region and the way it
is bought (STANDARD, SPOT, FLEX_START, or on a reservation). tests/unit/planning/test_consumption.py checks the file
is what the planner decides and that no plan, fallback or alternative offered as feasible uses a consumption mode
Google does not sell that shape in (functions/planning/data/consumption.json).

Regenerate after a deliberate change to the catalog or the planner with:

    .venv/bin/python -m tests.unit.planning.consumption_golden
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from functions.planning import PlanInput, PlanOutcome, plan_request
from functions.planning.catalog import load_catalog
from schemas.model_presets import load_presets

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
GOLDEN = Path(__file__).parents[1] / "golden" / "planner" / "consumption.json"
DATASET_BYTES = {"causal-lm": 10**9, "tabular": 10**8}


def cases() -> list[tuple[str, PlanInput]]:
    """(name, request) for every preset x (no allowlist, each GPU kind) x spot allowed/never x flex never/allowed."""
    out = []
    kinds = ("", *load_catalog().gpus)
    for name, preset in sorted(load_presets().items()):
        task = "causal-lm" if preset.family == "gpt" else "tabular-classification"
        for kind in kinds:
            for spot in ("allowed", "never"):
                for flex in ("never", "allowed"):
                    inp = PlanInput(
                        task=task,
                        preset=name,
                        dataset_bytes=DATASET_BYTES["causal-lm" if task == "causal-lm" else "tabular"],
                        batch_size=64,
                        gpu_allowlist=(kind,) if kind else (),
                        spot=spot,
                        flex_start=flex,
                    )
                    out.append((f"{name} {kind or 'any'} spot={spot} flex={flex}", inp))
    return out


def mode(plan: Any) -> str:
    """How the plan's machines are bought: reservation, FLEX_START, SPOT or STANDARD."""
    return "reservation" if plan.reservation else plan.scheduling_strategy


def summary(outcome: PlanOutcome) -> str:
    plan = outcome.plan
    if plan is None:
        return "rejected"
    nodes = f" x{plan.replica_count}" if plan.replica_count > 1 else ""
    return f"{plan.machine_type}{nodes} {plan.region} {mode(plan)}"


def decide() -> dict[str, str]:
    return {name: summary(plan_request(inp, now=NOW)) for name, inp in cases()}


def main() -> None:
    GOLDEN.write_text(json.dumps(decide(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")


if __name__ == "__main__":
    main()
