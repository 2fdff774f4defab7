"""Drop-to-CreateCustomJob latency on the local stack, warm, one dataset at a time.

    .venv/bin/python bench/latency.py [--drops 40] [--warmup 3] [--out FILE.json]

Starts a local stack of its own (free ports, a temporary state folder; the trainer image mapped to a no-op by the
Vertex emulator's --images, bench/local_stack), drops --warmup datasets to warm every function, then --drops more,
each once the one before has ended. For each it prints p50/p90/p99 from the `_SUCCESS` marker's finalize time to
the run's `timings.submitted_at` (CreateCustomJob answered) and hop by hop (bench/local_stack/timeline.py:
notification, ingest, delivery, plan, transactions, create). Target: p50 <= 150 ms, p99 <= 400 ms.

Each drop waits until the CreateCustomJob before it is one limiter interval old (60 / LANDFALL_VERTEX_CREATE_PER_MINUTE
s, the topology's vertex.rate_limits: 1.2 s at 50 a minute): one dataset at a time is not rate-limited, and a drop
made sooner measured the dispatcher sleeping for its limiter slot (the transactions hop p50 560 ms instead of 20 ms:
docs/measurements/2026-11-28-first-minutes.md). `make load` measures that queueing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.local_stack.harness import Stack, noop_stack
from bench.local_stack.report import machine, print_table, summary
from bench.local_stack.timeline import HOPS, Timeline, timeline
from deploy.topology import load_topology

TARGET_P50_MS, TARGET_P99_MS = 150, 400
ENDED_WITHIN_S = 60.0
COLD_ENDED_WITHIN_S = 300.0
"""The first drop starts every function's clients (and, on a busy machine, waits its turn for the CPU)."""
PER_MINUTE_ENV = "LANDFALL_VERTEX_CREATE_PER_MINUTE"
FIRST_POLL_S = 0.4
"""From the drop to the first read of its run: about when a warm run has ended (SUCCEEDED p50 ~380 ms)."""
POLL_S = 0.1


def limiter_interval_s() -> float:
    """Seconds between two CreateCustomJob slots of the dispatcher's limiter in the bench's stack (0: no limiter):
    the stack's services read the same variable, else the topology's default."""
    raw = os.environ.get(PER_MINUTE_ENV, str(load_topology().vertex_create_per_minute))
    try:
        per_minute = int(raw)
    except ValueError:
        wanted = "a whole number of calls a minute (0: no limiter)"
        raise SystemExit(f"{PER_MINUTE_ENV} must be {wanted}, got {raw!r}") from None
    return 60 / per_minute if per_minute > 0 else 0.0


def wait_for_slot(last_submitted: datetime | None, interval_s: float) -> None:
    """Sleep until the last CreateCustomJob is one limiter interval old (plus 50 ms: the clocks are the same
    machine's, the margin covers the stamps' rounding), so the next drop's call finds its slot free."""
    if last_submitted is None or interval_s <= 0:
        return
    left = (last_submitted + timedelta(seconds=interval_s + 0.05) - datetime.now(UTC)).total_seconds()
    if left > 0:
        time.sleep(left)


def one_drop(s: Stack, name: str, within_s: float = ENDED_WITHIN_S, paced: list[datetime] | None = None) -> Timeline:
    """Drop a dataset and wait for its run to end; paced: the last CreateCustomJob's time, waited on before the drop
    (wait_for_slot) and replaced by this run's."""
    if paced:
        wait_for_slot(paced[-1], limiter_interval_s())
    prefix = f"datasets/{name}/"
    finalized = s.drop(prefix)
    uri = f"gs://{s.topology.bucket}/{prefix}"
    deadline = time.monotonic() + within_s
    # The run is read from stamps, so when it is polled changes no figure; each poll does cost the Firestore
    # emulator and this process CPU the two cores share with the chain being measured (a query every 50 ms from
    # the drop on). The first read waits for about when a run ends.
    time.sleep(FIRST_POLL_S)
    while time.monotonic() < deadline:
        runs = s.runs_of(uri)
        if runs and runs[0].state.terminal:
            run = runs[0]
            got = timeline(run, s.version(run.run_id), finalized, s.job_created(run))
            if paced is not None and got.to_submitted is not None:
                paced[:] = [finalized + timedelta(seconds=got.to_submitted)]
            return got
        time.sleep(POLL_S)
    raise SystemExit(f"{uri}: no run ended within {within_s:g} s; see the stack's logs")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--drops", type=int, default=40, help="datasets measured, one at a time (default 40)")
    parser.add_argument("--warmup", type=int, default=3, help="datasets dropped first, not measured (default 3)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    if args.drops < 1:
        parser.error(f"--drops must be at least 1, got {args.drops}")
    paced: list[datetime] = []
    with noop_stack() as s:
        for i in range(args.warmup):
            one_drop(s, f"warmup-{i:03d}", COLD_ENDED_WITHIN_S, paced)
        before = machine()
        measured = [one_drop(s, f"latency-{i:03d}", paced=paced) for i in range(args.drops)]
        after = machine()
    rows = {
        "-> CreateCustomJob answered": summary([t.to_submitted for t in measured]),
        **{f"  {hop}": summary([t.hops[hop] for t in measured]) for hop in HOPS},
        "-> SUCCEEDED recorded": summary([t.to_succeeded for t in measured]),
    }
    print_table(
        f"drop to CreateCustomJob, warm, one dataset at a time ({args.drops} drops; "
        f"{before['nproc']} CPUs, load {before['load_average']} -> {after['load_average']})",
        rows,
    )
    total = rows["-> CreateCustomJob answered"]
    met = (total["p50_ms"] or 1e9) <= TARGET_P50_MS and (total["p99_ms"] or 1e9) <= TARGET_P99_MS
    print(f"target p50 <= {TARGET_P50_MS} ms, p99 <= {TARGET_P99_MS} ms: {'met' if met else 'NOT met'}")
    failed = [t.run_id for t in measured if t.to_succeeded is None]
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "drops": args.drops,
                    "machine_before": before,
                    "machine_after": after,
                    "latency": rows,
                    "target_met": met,
                    "runs_not_succeeded": failed,
                },
                indent=2,
            )
            + "\n"
        )
    if failed:
        print(f"runs that did not succeed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
