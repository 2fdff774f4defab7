"""The e2e test stack's idle CPU: what `make test`'s shared local stack burns while no test asks anything of it.

    .venv/bin/python bench/stack_idle.py [--idle 40] [--every-seconds 1]

Starts a local stack on free ports with the settings of tests/e2e/conftest.py (its routes and teams, the sweep and
the reconciler ticking every --every-seconds, 1 as in the tests), lets it settle for 15 s, then counts the CPU
seconds of each service (its process and its children, from /proc) over --idle seconds with nothing dropped.
`--every-seconds 60` leaves the ticks out: the difference is what the ticks cost. No target: docs/testing.md
("Where make test's time goes") holds the figures.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from deploy.local import stack  # noqa: E402
from tests.e2e import conftest as e2e  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _parents() -> dict[int, int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def process_tree(pid: int) -> list[int]:
    """pid and every process below it."""
    parents = _parents()
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo += [child for child, parent in parents.items() if parent == current]
    return tree


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of the processes still alive."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICKS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=float, default=40.0, help="seconds to count (default 40)")
    parser.add_argument("--every-seconds", type=int, default=1, help="sweep and reconcile ticks (default 1)")
    args = parser.parse_args()
    os.environ.update(
        {
            "LANDFALL_ROUTES_FILE": str(e2e.ROUTES_FILE),
            "LANDFALL_TEAMS_FILE": str(e2e.ROUTES_FILE.with_name("teams.toml")),
            stack.SWEEP_EVERY_ENV: str(args.every_seconds),
            "LANDFALL_ALLOWED_BUCKETS": f"landfall-landing,{e2e.EXTRA_BUCKET}",
            "LANDFALL_RECONCILE_GRACE_SECONDS": "5",
            "LANDFALL_WAIT_BACKOFF_SECONDS": "2",
            "LANDFALL_CANARY_MIN_HOURS": "1",
        }
    )
    state = Path(tempfile.mkdtemp(prefix="stack-idle-"))
    with stack.running_stack(state, dict.fromkeys(stack.SERVICE_ORDER, 0)) as info:
        time.sleep(15)
        trees = {service.name: process_tree(service.pid) for service in info.services}
        before = {name: cpu_seconds(pids) for name, pids in trees.items()}
        load = os.getloadavg()[0]
        time.sleep(args.idle)
        spent = {name: cpu_seconds(pids) - before[name] for name, pids in trees.items()}
    print(
        f"idle {args.idle:g} s, ticks every {args.every_seconds} s: {sum(spent.values()):.1f} CPU-s "
        f"(load {load:.1f} -> {os.getloadavg()[0]:.1f})"
    )
    for name, seconds in sorted(spent.items(), key=lambda item: -item[1]):
        print(f"  {name:22s} {seconds:5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
