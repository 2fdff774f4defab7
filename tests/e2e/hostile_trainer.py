"""A team's container for the end-to-end suite that reports figures no reader takes: the Vertex emulator runs it for
HOSTILE_IMAGE (tests/e2e/conftest.py). What it reports follows its dataset's folder name (the last part of
LANDFALL_DATA_URI), so one test drops every case at once:

- `canary-1e9`, `canary-inf`: its canary reports a step of 1e9 or Infinity seconds on every metrics line;
- `nonfinite`: its run reports Infinity and NaN figures (step time, memory, throughput, loss);
- `deep`: its run writes a metrics.json nested 30 levels deep in its model folder;
- `huge`: its run reports a 1.5 MB string and thousands of fields on a metrics line;
- any other: honest figures (a canary step of 0.25 s, the plan's).

Standard library only, and no sleeps: each job takes the time of a Python start-up."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def _lines(lines: list[dict[str, Any]]) -> None:
    with open(os.environ["LANDFALL_METRICS_FILE"], "a") as metrics:
        for line in lines:
            metrics.write(json.dumps(line) + "\n")  # json writes Infinity and NaN as JavaScript does


def canary(case: str) -> None:
    step = {"canary-1e9": 1e9, "canary-inf": float("inf")}.get(case, 0.25)
    _lines(
        [
            {"step": s, "loss": 1.0 / s, "step_seconds": step}
            for s in range(1, int(os.environ["LANDFALL_CANARY_STEPS"]) + 1)
        ]
    )


def run(case: str, model_dir: Path) -> None:
    if case == "deep":
        deep: dict[str, Any] = {"loss": 0.5}
        for _ in range(30):
            deep = {"level": deep}
        (model_dir / "metrics.json").write_text(json.dumps({"steps": 2, "final": {"loss": 0.5}, "deep": deep}))
        return
    last: dict[str, Any] = {"step": 2, "loss": 0.5}
    if case == "nonfinite":
        inf = float("inf")
        last = {
            "step": 2,
            "loss": float("nan"),
            "step_seconds": inf,
            "peak_memory_bytes": inf,
            "samples_per_second": -inf,
        }
    elif case == "huge":
        last = {**last, "note": "x" * 1_500_000, **{f"figure_{i}": i for i in range(5_000)}}
    _lines([{"step": 1, "loss": 1.0}, last])


def main() -> int:
    case = os.environ["LANDFALL_DATA_URI"].rstrip("/").rsplit("/", 1)[-1]
    if os.environ.get("LANDFALL_CANARY") == "1":
        canary(case)
        return 0
    model_dir = Path(os.environ["LANDFALL_MODEL_DIR"])
    run(case, model_dir)
    (model_dir / "model.json").write_text(json.dumps({"case": case}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
