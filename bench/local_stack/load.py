"""`make load`: N datasets dropped at once on a local stack of the load test's own, every run followed to its end.

    .venv/bin/python -m bench.local_stack.load [--datasets 500] [--concurrency 16] [--out load.json]

The trainer image is mapped to a no-op by the Vertex emulator's --images (bench/local_stack/noop_trainer.py), so the
machine runs every job. One dataset is dropped first to warm the functions (not counted); then N datasets (a tiny
CSV shard, then `_SUCCESS`) are uploaded with google-cloud-storage from --concurrency threads. Once every run has
ended (or --timeout passed) it checks, and prints:

  - exactly one run per dataset, no dataset without a run (lost), no run with two jobs (doubled): the run records,
    and ListCustomJobs by the `landfall-run-id` label (one Vertex job per run);
  - p50/p90/p99 from the marker's finalize to CreateCustomJob answered (`timings.submitted_at`) and to the
    SUCCEEDED record;
  - sustained requests per second through the dispatcher: its deliveries (each logs one outcome line) over the time
    from the first run RECEIVED to the last CreateCustomJob answered;
  - the dispatcher's CPU milliseconds per request: user + system CPU of its processes (functions-framework and its
    gunicorn worker, /proc) over the whole test, divided by its deliveries.

Exit status 1 when a run was lost, doubled or did not succeed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.local_stack.harness import Stack, noop_stack, seconds, session_cpu_seconds
from bench.local_stack.report import machine, print_table, summary
from bench.local_stack.timeline import HOPS, timeline
from deploy.topology import load_topology
from schemas.job_view import RUN_LABEL
from schemas.run_record import TERMINAL_STATES, RunRecord, RunState

PROGRESS_EVERY_S = 10.0


@dataclass(frozen=True)
class Checks:
    datasets: int
    runs: int
    lost: list[str]
    """Datasets with no run, or whose run did not end."""
    doubled: list[str]
    """Datasets with more than one run, and runs with more than one Vertex job."""
    not_succeeded: dict[str, str]
    """run id -> the state it ended in (other than SUCCEEDED)."""
    jobs: int
    orphan_jobs: list[str]
    """Vertex jobs labelled with a run id no run has."""

    @property
    def ok(self) -> bool:
        return not (self.lost or self.doubled or self.not_succeeded or self.orphan_jobs)


def ended_count(s: Stack, terminal: list[str]) -> int:
    """How many runs have ended (a projection: the run documents are large)."""
    from google.cloud.firestore_v1.base_query import FieldFilter

    runs = s.firestore.collection(s.topology.runs_collection)
    query = runs.where(filter=FieldFilter("state", "in", terminal)).select(["state"])
    return sum(1 for _ in query.stream())


def wait_until_ended(s: Stack, count: int, timeout_s: float) -> float:
    """Poll until count runs have ended or timeout_s passed; returns the seconds waited."""
    terminal = [state.value for state in TERMINAL_STATES]
    start = last_report = time.monotonic()
    while True:
        ended = ended_count(s, terminal)
        waited = time.monotonic() - start
        if ended >= count or waited > timeout_s:
            print(f"  {ended}/{count} runs ended after {waited:.0f} s", flush=True)
            return waited
        if time.monotonic() - last_report >= PROGRESS_EVERY_S:
            print(f"  {ended}/{count} runs ended after {waited:.0f} s", flush=True)
            last_report = time.monotonic()
        time.sleep(1.0)


def check(uris: list[str], runs: list[RunRecord], jobs: list[Any]) -> Checks:
    by_uri: dict[str, list[RunRecord]] = {}
    for run in runs:
        by_uri.setdefault(str(run.request.get("dataset", {}).get("uri")), []).append(run)
    lost = [u for u in uris if u not in by_uri or not by_uri[u][0].state.terminal]
    doubled = [u for u in uris if len(by_uri.get(u, [])) > 1]
    wanted = set(uris)
    counted = [r for r in runs if r.request.get("dataset", {}).get("uri") in wanted]
    labels = Counter(job.labels.get(RUN_LABEL, "") for job in jobs)
    doubled += [f"{run_id} ({n} jobs)" for run_id, n in labels.items() if n > 1]
    known = {r.run_id for r in runs}
    orphans = [run_id for run_id in labels if run_id not in known]
    lost += [f"{r.run_id} (no Vertex job)" for r in counted if labels.get(r.run_id, 0) == 0]
    not_succeeded = {
        r.run_id: f"{r.state}: {r.error.message if r.error else ''}" for r in counted if r.state != RunState.SUCCEEDED
    }
    return Checks(len(uris), len(counted), lost, doubled, not_succeeded, sum(labels.values()), orphans)


def dispatcher() -> str:
    """The function the training-requests topic feeds (deploy/topology.toml)."""
    topology = load_topology()
    return topology.fed_by(topology.requests_topic).name


def dispatch_deliveries(s: Stack) -> int:
    """Deliveries the dispatcher answered: functions/main.py logs one line naming the function for each."""
    name = dispatcher()
    log_path = next(x.log_path for x in s.info.services if x.name == name)
    return sum(1 for line in log_path.read_text().splitlines() if f'"message": "{name}: ' in line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.local_stack.load",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--datasets", type=int, default=500, help="datasets dropped at once (default 500)")
    parser.add_argument("--concurrency", type=int, default=16, help="upload threads (default 16)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for every run (3600)")
    parser.add_argument("--out", type=Path, default=Path("load.json"), help="JSON results (default load.json)")
    parser.add_argument(
        "--create-per-minute",
        type=int,
        default=0,
        help="the dispatcher's CreateCustomJob limit per region and minute (LANDFALL_VERTEX_CREATE_PER_MINUTE); "
        "default 0: no limiter, as before issue 26, so figures stay comparable",
    )
    args = parser.parse_args(argv)
    os.environ["LANDFALL_VERTEX_CREATE_PER_MINUTE"] = str(args.create_per_minute)  # inherited by the functions
    if args.datasets < 1 or args.concurrency < 1:
        parser.error("--datasets and --concurrency must be at least 1")
    with noop_stack() as s:
        warm = s.drop("datasets/load-warmup/")
        wait_until_ended(s, 1, 300)
        dispatcher_pid = s.pid(dispatcher())
        cpu_before, deliveries_before = session_cpu_seconds(dispatcher_pid), dispatch_deliveries(s)
        before = machine()
        prefixes = [f"datasets/load-{i:05d}/" for i in range(args.datasets)]
        print(f"dropping {args.datasets} datasets from {args.concurrency} threads", flush=True)
        started = time.monotonic()
        with ThreadPoolExecutor(args.concurrency) as pool:
            finalized: dict[str, datetime] = dict(zip(prefixes, pool.map(s.drop, prefixes), strict=True))
        print(f"  dropped in {time.monotonic() - started:.1f} s", flush=True)
        waited = wait_until_ended(s, args.datasets + 1, args.timeout)
        cpu = session_cpu_seconds(dispatcher_pid) - cpu_before
        deliveries = dispatch_deliveries(s) - deliveries_before
        after = machine()
        runs = s.runs()
        versions = {v["run_id"]: v for v in s.versions()}
        jobs = s.jobs({r.vertex.region for r in runs if r.vertex is not None})
    uris = [f"gs://{s.topology.bucket}/{p}" for p in prefixes]
    warm_uri = f"gs://{s.topology.bucket}/datasets/load-warmup/"
    checks = check(
        uris,
        runs,
        [
            j
            for j in jobs
            if j.labels.get(RUN_LABEL)
            in {r.run_id for r in runs if r.request.get("dataset", {}).get("uri") != warm_uri}
        ],
    )
    by_uri = {str(r.request.get("dataset", {}).get("uri")): r for r in runs}
    created = {j.labels.get(RUN_LABEL): j.create_time for j in jobs}
    lines = [
        timeline(by_uri[u], versions.get(by_uri[u].run_id), finalized[p], created.get(by_uri[u].run_id))
        for u, p in zip(uris, prefixes, strict=True)
        if u in by_uri
    ]
    received = [by_uri[u].history[0].at for u in uris if u in by_uri]
    submitted = [at for u in uris if u in by_uri and (at := by_uri[u].timings.submitted_at)]
    window = seconds(max(submitted), min(received)) if submitted and received else None
    rows = {
        "-> CreateCustomJob answered": summary([t.to_submitted for t in lines]),
        **{f"  {hop}": summary([t.hops[hop] for t in lines]) for hop in HOPS},
        "-> SUCCEEDED recorded": summary([t.to_succeeded for t in lines]),
    }
    print_table(
        f"load: {args.datasets} datasets at once ({before['nproc']} CPUs, load {before['load_average']} "
        f"-> {after['load_average']}; warm-up finalized {warm:%H:%M:%S})",
        rows,
    )
    rate = deliveries / window if window else None
    cpu_ms = 1000 * cpu / deliveries if deliveries else None
    print(
        f"dispatcher: {deliveries} deliveries in {window or 0:.1f} s (first RECEIVED -> last CreateCustomJob "
        f"answered) = {rate or 0:.1f} requests/s; {cpu_ms or 0:.1f} CPU ms per request"
    )
    print(
        f"runs: {checks.runs} for {checks.datasets} datasets; Vertex jobs: {checks.jobs}; lost {len(checks.lost)}, "
        f"doubled {len(checks.doubled)}, not SUCCEEDED {len(checks.not_succeeded)}, orphan jobs "
        f"{len(checks.orphan_jobs)}; every run ended {waited:.0f} s after the drops began"
    )
    result = {
        "datasets": args.datasets,
        "concurrency": args.concurrency,
        "machine_before": before,
        "machine_after": after,
        "latency": rows,
        "dispatcher": {
            "deliveries": deliveries,
            "window_s": window,
            "requests_per_s": rate,
            "cpu_ms_per_request": cpu_ms,
            "cpu_s": cpu,
        },
        "ended_after_s": waited,
        "checks": {
            "runs": checks.runs,
            "jobs": checks.jobs,
            "lost": checks.lost,
            "doubled": checks.doubled,
            "not_succeeded": checks.not_succeeded,
            "orphan_jobs": checks.orphan_jobs,
            "ok": checks.ok,
        },
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results in {args.out}")
    for name, found in (
        ("lost", checks.lost),
        ("doubled", checks.doubled),
        ("not SUCCEEDED", list(checks.not_succeeded.items())),
        ("orphan jobs", checks.orphan_jobs),
    ):
        if found:
            print(f"{name}: {found[:10]}{' ...' if len(found) > 10 else ''}", file=sys.stderr)
    return 0 if checks.ok else 1


if __name__ == "__main__":
    sys.exit(main())
