"""The golden Plan examples in schemas/examples/: the requests behind them, and a writer.

Regenerate after a deliberate catalog or model change with:  .venv/bin/python -m tests.unit.planning.golden
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from functions.planning import PlanInput, PlannerConfig, plan_request
from tests.unit.planning.outcomes import chosen

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
EXAMPLES = Path(__file__).parents[3] / "schemas/examples"
CONFIG = PlannerConfig(max_alternatives=4)
REQUESTS = {
    "plan.json": PlanInput(
        task="causal-lm",
        preset="gpt-1.3b",
        dataset_bytes=2 * 10**9,
        epochs=1,
        batch_size=64,
        deadline=NOW + timedelta(hours=12),
        spot="never",
    ),
    "plan_cpu.json": PlanInput(
        task="tabular-classification",
        preset="mlp-small",
        dataset_bytes=48_213,
        dataset_objects=4,
        epochs=5,
        batch_size=64,
    ),
}


def planned(name: str) -> dict:
    return chosen(plan_request(REQUESTS[name], CONFIG, now=NOW)).to_dict()


def main() -> None:
    for name in REQUESTS:
        (EXAMPLES / name).write_text(json.dumps(planned(name), indent=2) + "\n")
        print(f"wrote {EXAMPLES / name}")


if __name__ == "__main__":
    main()
