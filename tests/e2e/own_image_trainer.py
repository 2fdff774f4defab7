"""A team's container for the end-to-end suite: the Vertex emulator runs it for OWN_IMAGE (tests/e2e/conftest.py maps
the image with LANDFALL_VERTEX_IMAGES), under its Cloud Storage stand-in, as Vertex would run the team's entrypoint.

It keeps to the contract only (docs/trainer-contract.md): it reads LANDFALL_DATA_FILES, waits `--seconds` (so a
test can act while it runs), appends one metrics line per step to LANDFALL_METRICS_FILE and writes its model to
LANDFALL_MODEL_DIR; as a canary (LANDFALL_CANARY=1) it times LANDFALL_CANARY_STEPS steps of `--step-seconds` and
reports them in its metrics lines, or fails (`--fail-canary`). Standard library only: a replica starts in a fraction
of a second, so the recovery tests that run on it (exactly-once, the reconciler) cost no training."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--step-seconds", type=float, default=0.25, help="a canary step's time (docs/canary.md)")
    parser.add_argument("--canary-seconds", type=float, default=0.0, help="a canary's wait before its steps")
    parser.add_argument("--fail-canary", action="store_true", help="a canary exits 1, as code that breaks would")
    args = parser.parse_args()
    objects = [json.loads(line) for line in Path(os.environ["LANDFALL_DATA_FILES"]).read_text().splitlines() if line]
    size = sum(int(o["size"]) for o in objects)
    if os.environ.get("LANDFALL_CANARY") == "1":
        return canary(args)
    time.sleep(args.seconds)
    with open(os.environ["LANDFALL_METRICS_FILE"], "a") as metrics:
        for step in (1, 2):
            metrics.write(json.dumps({"step": step, "loss": 1.0 / step, "objects": len(objects)}) + "\n")
    Path(os.environ["LANDFALL_MODEL_DIR"], "model.json").write_text(json.dumps({"bytes_seen": size}))
    return 0


def canary(args: argparse.Namespace) -> int:
    """Canary mode, as the contract asks of a team's code: at most LANDFALL_CANARY_STEPS steps, each timed and
    reported as `step_seconds` in a metrics line."""
    time.sleep(args.canary_seconds)
    if args.fail_canary:
        print("canary: the model does not fit (simulated by --fail-canary)", file=sys.stderr)
        return 1
    with open(os.environ["LANDFALL_METRICS_FILE"], "a") as metrics:
        for step in range(1, int(os.environ["LANDFALL_CANARY_STEPS"]) + 1):
            began = time.perf_counter()
            time.sleep(args.step_seconds)
            took = time.perf_counter() - began
            metrics.write(json.dumps({"step": step, "loss": 1.0 / step, "step_seconds": round(took, 4)}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
