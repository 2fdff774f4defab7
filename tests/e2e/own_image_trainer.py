"""A team's container for the end-to-end suite: the Vertex emulator runs it for OWN_IMAGE (tests/e2e/conftest.py maps
the image with LANDFALL_VERTEX_IMAGES), under its Cloud Storage stand-in, as Vertex would run the team's entrypoint.

It keeps to the contract only (docs/trainer-contract.md): it reads LANDFALL_DATA_FILES, waits `--seconds` (so a
test can act while it runs), appends one metrics line per step to LANDFALL_METRICS_FILE and writes its model to
LANDFALL_MODEL_DIR. Standard library only: a replica starts in a fraction of a second, so the recovery tests that
run on it (exactly-once, the reconciler) cost no training."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    objects = [json.loads(line) for line in Path(os.environ["LANDFALL_DATA_FILES"]).read_text().splitlines() if line]
    size = sum(int(o["size"]) for o in objects)
    time.sleep(args.seconds)
    with open(os.environ["LANDFALL_METRICS_FILE"], "a") as metrics:
        for step in (1, 2):
            metrics.write(json.dumps({"step": step, "loss": 1.0 / step, "objects": len(objects)}) + "\n")
    Path(os.environ["LANDFALL_MODEL_DIR"], "model.json").write_text(json.dumps({"bytes_seen": size}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
