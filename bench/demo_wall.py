"""End-to-end demo benchmark: wall seconds of `landfall demo` on a fresh local stack.

    .venv/bin/python bench/demo_wall.py [--timeout 600]

Starts a new local stack in a temporary state directory, every service on a free port (`landfall up --port
NAME=0`, so a stack already running on the topology's ports is left alone), then runs `landfall demo` against it
(drop a dataset -> the run SUCCEEDED with metrics) and stops the stack. Prints the seconds of each phase: stack
start, demo (upload to SUCCEEDED), and both together, what `make demo` costs on a machine whose stack is down.
Exit status 1 when the demo fails. Slow (about a minute): the trainer runs for real.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from deploy.topology import load_topology  # noqa: E402


def landfall(args: list[str], env: dict[str, str], timeout: float) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "landfall.cli", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return time.monotonic() - started, proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=600, help="seconds the demo may take (default 600)")
    ns = parser.parse_args()
    services = ["pubsub", "firestore", "storage", "vertex", *(f.name for f in load_topology().functions)]
    with tempfile.TemporaryDirectory(prefix="landfall-demo-bench-") as state:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("LANDFALL_", "GOOGLE_", "PUBSUB_", "FIRESTORE_", "STORAGE_"))
        }
        env.update(PYTHONPATH=str(REPO), LANDFALL_STATE_DIR=state)
        load = os.getloadavg()
        print(f"demo benchmark: fresh stack in {state}, {os.cpu_count()} CPUs, load average {load[0]:.2f}", flush=True)
        try:
            up_s, up = landfall(["up", *(f"--port={name}=0" for name in services)], env, 300)
            if up.returncode != 0:
                print(f"landfall up failed ({up.returncode}):\n{up.stdout[-2000:]}\n{up.stderr[-2000:]}")
                return 1
            demo_s, demo = landfall(["demo", "--quiet", f"--timeout={ns.timeout:.0f}"], env, ns.timeout + 120)
        finally:
            landfall(["down"], env, 120)
        if demo.returncode != 0:
            print(f"landfall demo failed ({demo.returncode}):\n{demo.stdout[-3000:]}\n{demo.stderr[-3000:]}")
            return 1
        load = os.getloadavg()
        print(
            f"stack start {up_s:6.1f} s\ndemo        {demo_s:6.1f} s  (upload -> SUCCEEDED, `landfall demo` on a "
            f"running stack)\ntotal       {up_s + demo_s:6.1f} s  (load average after: {load[0]:.2f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
