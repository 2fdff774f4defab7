"""`make load`: N datasets from 5 teams dropped at once on a local stack of the load test's own, with the Vertex
emulator enforcing Google's rate limits, every run followed to its end.

    .venv/bin/python -m bench.local_stack.load [--datasets 1000] [--rate-limits real|off] [--rate-scale 1]
        [--create-per-minute N] [--teams-file F] [--job-seconds 10] [--concurrency 16] [--out load.json]

The trainer image is mapped to a no-op by the Vertex emulator's --images (bench/local_stack/noop_trainer.py), so the
machine runs every job; each waits --job-seconds before it ends, holding its GPU. The stack's routes are
load_routes.toml (a prefix per team, one GPU per run) and its teams load_teams.toml (each owns its prefix, with a GPU
cap that binds and a budget that does not). With --rate-limits real
the emulator refuses calls past Google's per-minute quotas (bench/local_stack/limits.py: 60 CreateCustomJob and
UploadModel, 600 of each other method, per region, times --rate-scale) and the dispatcher's CreateCustomJob limiter
is set under them, as a deployment sets it (the topology's 50 a minute, times --rate-scale). One dataset is dropped
first to warm the functions (not counted); then N datasets (a tiny CSV shard, then `_SUCCESS`), spread over the
teams, are uploaded with google-cloud-storage from --concurrency threads, while a thread samples the emulator's jobs
in flight every second (GetJobsInFlight, a control call no rate limit counts). Once every run has ended (or
--timeout passed) it checks, and prints:

  - exactly one run per dataset, no dataset without a run (lost), no run with two jobs (doubled): the run records,
    and ListCustomJobs by the `landfall-run-id` label (one Vertex job per run);
  - no run moved to another plan after a rate-limited attempt, and none WAITING for anything but its team's cap or
    budget (no capacity faults are set, so any other wait is a rate limit taken for capacity);
  - each team's GPUs in flight (the jobs sampled, by the team owning each run's dataset) never above its caps;
  - the Vertex calls per minute by method and region (the emulator's GetFaults per_minute), against the limits, and
    each quota's methods added up as Google counts them;
  - the queueing time: submission.queued (since -> over_at) of the runs a rate limit held back, and from SUBMITTING
    to CreateCustomJob answered for every run, p50/p90/p99/max;
  - p50/p90/p99 from the marker's finalize to CreateCustomJob answered (`timings.submitted_at`) and to the
    SUCCEEDED record;
  - sustained requests per second through the dispatcher: its deliveries (each logs one outcome line) over the time
    from the first run RECEIVED to the last CreateCustomJob answered;
  - the dispatcher's CPU milliseconds per request: user + system CPU of its processes (functions-framework and its
    gunicorn worker, /proc) over the whole test, divided by its deliveries; and the same less its idle CPU (measured
    over --idle-seconds before the drops, bench/server_cpu.py), the part Cloud Run functions bill;
  - per function, the deliveries retried because a Firestore transaction kept colliding (those on a team's ledger
    apart), and the reconcile ticks skipped because a pass was still running (their logs, `collisions_retried`).

Exit status 1 when a run was lost, doubled, did not succeed, moved to a fallback or waited for a rate limit, or a team
passed its cap.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.local_stack.harness import Stack, idle_cpu_ms_per_s, noop_stack, seconds, session_cpu_seconds
from bench.local_stack.limits import (
    ALL_KINDS,
    GOOGLE_PER_MINUTE,
    RATE_MODES,
    calls_per_minute,
    cap_peaks,
    fallback_after_rate_limit,
    gpus_in_flight,
    limiter_per_minute,
    parked,
    queued_seconds,
    quota_peaks,
    rate_limit_plan,
    rate_limits,
    waited_for_team,
)
from bench.local_stack.noop_trainer import SECONDS_ENV
from bench.local_stack.report import machine, print_calls_per_minute, print_table, summary
from bench.local_stack.sampler import JobsSampler
from bench.local_stack.timeline import HOPS, timeline
from deploy.routes import read_routes
from deploy.teams import Teams, read_teams
from deploy.topology import load_topology
from deploy.vertex_emulator.control import get_faults
from schemas.job_view import RUN_LABEL
from schemas.run_record import TERMINAL_STATES, RunRecord, RunState

PROGRESS_EVERY_S = 10.0
AFTER_INGEST = ("delivery", "plan", "transactions", "create")
"""The hops from the request published to CreateCustomJob answered: where a burst queues."""
LOAD_ROUTES = Path(__file__).with_name("load_routes.toml")
"""The load stack's routes (LANDFALL_ROUTES_FILE): one prefix per team, each training on one GPU."""
LOAD_TEAMS = Path(__file__).with_name("load_teams.toml")
"""The load stack's teams (LANDFALL_TEAMS_FILE): each owns one route's prefix, with a GPU cap."""


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


def collisions_retried(s: Stack) -> dict[str, dict[str, int]]:
    """Per function: deliveries retried because a Firestore transaction "kept colliding" (firestore_tx.py): all
    of them and those on a team ledger (`teams/...`); and reconcile ticks skipped because a pass was running."""
    out: dict[str, dict[str, int]] = {}
    for service in s.info.services:
        if not service.log_path.exists():
            continue
        lines = service.log_path.read_text(errors="replace").splitlines()
        colliding = [x for x in lines if "will be retried" in x and "kept colliding" in x]
        skipped = sum(1 for x in lines if "skipped: a pass is running" in x)
        if colliding or skipped:
            out[service.name] = {
                "kept_colliding": len(colliding),
                "on_team_ledger": sum(1 for x in colliding if "teams/" in x),
                "passes_skipped": skipped,
            }
    return out


def submitting_to_created(run: RunRecord) -> float | None:
    """From the run's first SUBMITTING to CreateCustomJob answered: the time the submission waited (the limiter, in
    the delivery or reserved, and Vertex's rate-limit answers) plus the call itself."""
    first = next((h.at for h in run.history if h.state == RunState.SUBMITTING), None)
    return seconds(run.timings.submitted_at, first)


def team_of_runs(runs: list[RunRecord], teams: Teams, bucket: str) -> dict[str, str]:
    """run id -> the team owning the run's dataset (the teams file's longest matching prefix)."""
    found = {}
    for run in runs:
        uri = str(run.request.get("dataset", {}).get("uri", ""))
        team = teams.owner_of(bucket, uri.removeprefix(f"gs://{bucket}/"))
        if team is not None:
            found[run.run_id] = team.name
    return found


def team_caps(teams: Teams) -> dict[str, dict[str, int]]:
    """Each team's GPU caps: team -> {accelerator type, or ALL_KINDS for every kind together: GPUs}."""
    return {team.name: dict(team.gpu_cap) for team in teams.teams}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.local_stack.load",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--datasets", type=int, default=1000, help="datasets dropped at once (default 1000)")
    parser.add_argument("--concurrency", type=int, default=16, help="upload threads (default 16)")
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=20.0,
        help="how long the dispatcher's idle CPU is measured before the drops (default 20)",
    )
    parser.add_argument("--timeout", type=float, default=5400.0, help="seconds to wait for every run (5400)")
    parser.add_argument("--out", type=Path, default=Path("load.json"), help="JSON results (default load.json)")
    parser.add_argument(
        "--rate-limits",
        choices=RATE_MODES,
        default="real",
        help="real (default): the Vertex emulator enforces Google's per-minute rate quotas on every JobService and "
        "ModelService method (60 for submissions, 600 for the others, per region), times --rate-scale; off: none",
    )
    parser.add_argument(
        "--rate-scale",
        type=float,
        default=1.0,
        help="multiply the rate limits and the dispatcher's limiter by this (default 1: Google's figures; 5 makes "
        "a burst queue a fifth as long)",
    )
    parser.add_argument(
        "--create-per-minute",
        type=int,
        default=None,
        help="the dispatcher's CreateCustomJob limit per region and minute (LANDFALL_VERTEX_CREATE_PER_MINUTE); "
        "default: the topology's (50, under Google's 60) times --rate-scale with --rate-limits real, 0 (no limiter, "
        "figures comparable with runs made without a limiter) with off",
    )
    parser.add_argument(
        "--job-seconds",
        type=float,
        default=10.0,
        help="how long each no-op job holds its GPUs (LANDFALL_NOOP_SECONDS, default 10: the teams' caps bind)",
    )
    parser.add_argument(
        "--teams-file",
        type=Path,
        default=LOAD_TEAMS,
        help="the load stack's teams (LANDFALL_TEAMS_FILE; default bench/local_stack/load_teams.toml: 5 teams, one "
        "per route of load_routes.toml, GPU caps that bind)",
    )
    args = parser.parse_args(argv)
    if args.datasets < 1 or args.concurrency < 1:
        parser.error("--datasets and --concurrency must be at least 1")
    if args.job_seconds < 0:
        parser.error(f"--job-seconds must be 0 or more, found {args.job_seconds}")
    if not args.rate_scale > 0:
        parser.error(f"--rate-scale must be above 0 (1 = Google's figures), found {args.rate_scale}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    topology = load_topology()
    limits = rate_limits(args.rate_limits, args.rate_scale)
    faults = rate_limit_plan(limits)
    limiter = args.create_per_minute
    if limiter is None:
        real = args.rate_limits == "real"
        limiter = limiter_per_minute(topology.vertex_create_per_minute, args.rate_scale) if real else 0
    routes = read_routes(LOAD_ROUTES)
    teams = read_teams(args.teams_file)
    env = {
        "LANDFALL_VERTEX_CREATE_PER_MINUTE": str(limiter),
        "LANDFALL_ROUTES_FILE": str(LOAD_ROUTES),
        "LANDFALL_TEAMS_FILE": str(args.teams_file),
        SECONDS_ENV: str(args.job_seconds),
        "LANDFALL_CANARY_FIRST_RUNS": "0",  # the control plane's throughput: one job per run
    }
    print(
        f"rate limits {args.rate_limits} (x{args.rate_scale:g}): {limits or 'none'}; the dispatcher's CreateCustomJob "
        f"limiter {limiter or 'off'} a minute; teams ({args.teams_file}): "
        + ", ".join(f"{t.name} (cap {dict(t.gpu_cap)})" for t in teams.teams),
        flush=True,
    )
    with noop_stack(faults=faults, env=env) as s:
        address = s.info.env["LANDFALL_VERTEX_ENDPOINT"]
        warm = s.drop(f"{routes[0].prefix}load-warmup/")
        wait_until_ended(s, 1, 300)
        dispatcher_pid = s.pid(dispatcher())
        # The dispatcher's CPU while nothing arrives (its server's and gRPC's timers): on Cloud Run functions, whose
        # CPU is allocated, and billed, only while a request is processed, this is not part of a request's cost.
        idle_ms_per_s = sum(idle_cpu_ms_per_s(dispatcher_pid, args.idle_seconds).values())
        cpu_before, deliveries_before = session_cpu_seconds(dispatcher_pid), dispatch_deliveries(s)
        before = machine()
        prefixes = [f"{routes[i % len(routes)].prefix}load-{i:05d}/" for i in range(args.datasets)]
        print(f"dropping {args.datasets} datasets from {args.concurrency} threads", flush=True)
        wall_start, started = time.time(), time.monotonic()
        with JobsSampler(address, started) as sampler:
            with ThreadPoolExecutor(args.concurrency) as pool:
                finalized: dict[str, datetime] = dict(zip(prefixes, pool.map(s.drop, prefixes), strict=True))
            print(f"  dropped in {time.monotonic() - started:.1f} s", flush=True)
            waited = wait_until_ended(s, args.datasets + 1, args.timeout)
        counted_calls = get_faults(address)  # before this test's own ListCustomJobs below
        cpu = session_cpu_seconds(dispatcher_pid) - cpu_before
        measured_s = time.monotonic() - started
        deliveries = dispatch_deliveries(s) - deliveries_before
        collided = collisions_retried(s)
        after = machine()
        runs = s.runs()
        versions = {v["run_id"]: v for v in s.versions()}
        jobs = s.jobs({r.vertex.region for r in runs if r.vertex is not None})
    uris = [f"gs://{s.topology.bucket}/{p}" for p in prefixes]
    warm_uri = f"gs://{s.topology.bucket}/{routes[0].prefix}load-warmup/"
    test_runs = {r.run_id for r in runs if r.request.get("dataset", {}).get("uri") != warm_uri}
    checks = check(uris, runs, [j for j in jobs if j.labels.get(RUN_LABEL) in test_runs])
    by_uri = {str(r.request.get("dataset", {}).get("uri")): r for r in runs}
    counted = [by_uri[u] for u in uris if u in by_uri]
    created = {j.labels.get(RUN_LABEL): j.create_time for j in jobs}
    lines = [
        timeline(by_uri[u], versions.get(by_uri[u].run_id), finalized[p], created.get(by_uri[u].run_id))
        for u, p in zip(uris, prefixes, strict=True)
        if u in by_uri
    ]
    received = [r.history[0].at for r in counted]
    submitted = [at for r in counted if (at := r.timings.submitted_at)]
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
    busy_ms = (1000 * cpu - idle_ms_per_s * measured_s) / deliveries if deliveries else None
    print(
        f"dispatcher: {deliveries} deliveries in {window or 0:.1f} s (first RECEIVED -> last CreateCustomJob "
        f"answered) = {rate or 0:.1f} requests/s; {cpu_ms or 0:.1f} CPU ms per request; "
        f"{busy_ms or 0:.1f} without its idle CPU ({idle_ms_per_s:.2f} ms a second, measured before the drops, over "
        f"the {measured_s:.0f} s measured)"
    )

    print(
        "Firestore transactions that kept colliding (deliveries retried): "
        + (
            "; ".join(
                f"{name} {c['kept_colliding']} ({c['on_team_ledger']} on a team ledger)"
                + (f", {c['passes_skipped']} reconcile ticks skipped (a pass running)" if c["passes_skipped"] else "")
                for name, c in sorted(collided.items())
            )
            or "none"
        )
    )

    per_minute = counted_calls.get("per_minute", {})
    calls = calls_per_minute(per_minute if isinstance(per_minute, dict) else {}, wall_start)
    print_calls_per_minute(calls, limits)
    quota_use = {
        f"{quota} {region}": {"peak_per_minute": peak, "google_limit": GOOGLE_PER_MINUTE[quota] * args.rate_scale}
        for (quota, region), peak in quota_peaks(calls).items()
    }
    for name, use in quota_use.items():
        over = (
            " (over: Google counts the quota's methods together)"
            if use["peak_per_minute"] > use["google_limit"]
            else ""
        )
        print(
            f"quota {name}: at most {use['peak_per_minute']} calls in a minute, all methods together, limit "
            f"{use['google_limit']:g}{over}"
        )

    queued = [r for r in counted if r.submission.queued is not None]
    reasons = Counter(r.submission.queued.reason for r in queued if r.submission.queued is not None)
    team_waited = [r for r in counted if waited_for_team(r)]
    after_ingest = [
        sum(v for h in AFTER_INGEST if (v := t.hops[h]) is not None)
        if all(t.hops[h] is not None for h in AFTER_INGEST)
        else None
        for t in lines
    ]
    waits_s = {
        "request published -> CreateCustomJob answered": summary(after_ingest),
        "  in Pub/Sub before the dispatcher (delivery)": summary([t.hops["delivery"] for t in lines]),
        "  SUBMITTING -> CreateCustomJob answered": summary([submitting_to_created(r) for r in counted]),
        "  queued by a rate limit (since -> over_at)": summary([queued_seconds(r) for r in queued]),
    }
    print_table(
        f"queueing: {len(queued)} of {len(counted)} runs queued by a rate limit "
        f"({', '.join(f'{k} {n}' for k, n in sorted(reasons.items())) or 'none'}), {len(team_waited)} WAITING for "
        "their team's cap or budget",
        waits_s,
        first_column="wait",
    )
    queueing = {"queued_runs": len(queued), "by_reason": dict(reasons), "team_waited": len(team_waited), **waits_s}

    fallbacks = [f for r in counted if (f := fallback_after_rate_limit(r))]
    waits = [w for r in counted if (w := parked(r))]
    team_of = team_of_runs(runs, teams, s.topology.bucket)
    caps = cap_peaks(sampler.samples, team_of, team_caps(teams))
    in_flight = Counter[str]()
    for sample in sampler.samples:
        for (team, kind), n in gpus_in_flight(sample, team_of).items():
            if kind == ALL_KINDS:
                in_flight[team] = max(in_flight[team], n)
    print(
        f"GPUs in flight, sampled {len(sampler.samples)} times ({len(sampler.errors)} samples failed), most per team: "
        + ", ".join(f"{team} {n}" for team, n in sorted(in_flight.items()))
    )
    for cap in caps:
        print(
            f"  {cap.team} {cap.kind}: cap {cap.cap}, at most {cap.peak} in flight"
            + (f", OVER {len(cap.over)} times" if cap.over else "")
        )
    if not caps:
        print(f"  team GPU caps: none in {args.teams_file}")
    over_cap = [f"{c.team} {c.kind} cap {c.cap}: {list(c.over[:5])}" for c in caps if c.over]
    print(
        f"runs: {checks.runs} for {checks.datasets} datasets; Vertex jobs: {checks.jobs}; lost {len(checks.lost)}, "
        f"doubled {len(checks.doubled)}, not SUCCEEDED {len(checks.not_succeeded)}, orphan jobs "
        f"{len(checks.orphan_jobs)}, moved to a fallback after a rate limit {len(fallbacks)}, waited for other than "
        f"a team limit {len(waits)}, over a team's cap {len(over_cap)}; every run ended {waited:.0f} s after the "
        "drops began"
    )
    ok = checks.ok and not fallbacks and not waits and not over_cap
    result = {
        "datasets": args.datasets,
        "concurrency": args.concurrency,
        "rate_limits": {"mode": args.rate_limits, "scale": args.rate_scale, "per_minute": limits},
        "create_per_minute": limiter,
        "machine_before": before,
        "machine_after": after,
        "latency": rows,
        "dispatcher": {
            "deliveries": deliveries,
            "window_s": window,
            "requests_per_s": rate,
            "cpu_ms_per_request": cpu_ms,
            "cpu_ms_per_request_less_idle": busy_ms,
            "idle_cpu_ms_per_s": idle_ms_per_s,
            "cpu_s": cpu,
        },
        "collisions_retried": collided,
        "vertex_calls_per_minute": {
            f"{c.method} {c.region}": {"calls": c.calls, "refused": c.refused, "limit": limits.get(c.method)}
            for c in calls
        },
        "quotas": quota_use,
        "queueing": queueing,
        "gpus_in_flight": {"samples": len(sampler.samples), "sample_errors": sampler.errors[:10], "peak": in_flight},
        "caps": [{"team": c.team, "kind": c.kind, "cap": c.cap, "peak": c.peak, "over": c.over} for c in caps],
        "ended_after_s": waited,
        "checks": {
            "runs": checks.runs,
            "jobs": checks.jobs,
            "lost": checks.lost,
            "doubled": checks.doubled,
            "not_succeeded": checks.not_succeeded,
            "orphan_jobs": checks.orphan_jobs,
            "fallback_after_rate_limit": fallbacks,
            "waited_not_for_a_team_limit": waits,
            "over_cap": over_cap,
            "ok": ok,
        },
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results in {args.out}")
    for name, found in (
        ("lost", checks.lost),
        ("doubled", checks.doubled),
        ("not SUCCEEDED", list(checks.not_succeeded.items())),
        ("orphan jobs", checks.orphan_jobs),
        ("moved to a fallback after a rate limit", fallbacks),
        ("waited for other than a team limit", waits),
        ("over a team's GPU cap", over_cap),
    ):
        if found:
            print(f"{name}: {found[:10]}{' ...' if len(found) > 10 else ''}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
