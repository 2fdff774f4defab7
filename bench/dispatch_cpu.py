"""The dispatcher's CPU per request, and how much of it the client libraries spend on the same calls.

    .venv/bin/python bench/dispatch_cpu.py [--requests 60] [--out FILE.json]

Starts a local stack of its own (bench/local_stack: free ports, a temporary state folder, the trainer a no-op),
drops one dataset to warm it, then hands --requests TrainingRequests for that dataset (each its own run) to the
dispatcher's handler in this process, built as the deployed function builds it (functions.wiring.dispatch_deps,
the same clients against the same emulators): read the run, create it, check the dataset (list and read the
label objects), plan, the transaction that records the plan and claims the submission, the per-region submission
slot (a transaction), CreateCustomJob, the transaction that records the job.

It prints:
- CPU per request (user + system of this process, `time.process_time`, around each call; the median and mean):
  the figure issue 26 item 6 sets at most 15 ms. The load test's figure (docs/benchmarks.md) also counts the
  functions-framework server that receives the push (HTTP, CloudEvent parsing), which this leaves out.
- Where it goes, from a second pass under cProfile with a CPU clock: the share spent in Landfall's own code
  (functions/, schemas/), in the client libraries (google-cloud-*, google-api-core, grpc, proto-plus, protobuf,
  google-auth, requests, urllib3) and in the standard library they call. The client libraries' share, applied to
  the unprofiled median, is their floor: what the same reads, writes and create call cost through the libraries
  whatever code drives them.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.latency import COLD_ENDED_WITHIN_S, one_drop  # noqa: E402
from bench.local_stack.harness import noop_stack  # noqa: E402
from bench.local_stack.report import machine  # noqa: E402

TARGET_MS = 15.0
LIBRARIES = ("/google/", "/grpc/", "/proto/", "/requests/", "/urllib3/", "/google_crc32c/", "/cachetools/")
"""Path parts of the client libraries' files (site-packages), for the profile's split."""
STDLIB = "standard library and interpreter"
OWN = (str(REPO / "functions") + "/", str(REPO / "schemas") + "/", str(REPO / "deploy") + "/")


def owner(filename: str) -> str:
    if filename.startswith(OWN):
        return "landfall"
    if "site-packages" in filename and any(part in filename for part in LIBRARIES):
        return "client libraries"
    if "site-packages" in filename:
        return "other packages"
    return STDLIB


def split(profile: cProfile.Profile) -> dict[str, float]:
    """Own CPU seconds (tottime) per owner, over the whole profile. The standard library and the interpreter's
    built-ins (isinstance, dict methods, copy.deepcopy, threading) count for whoever called them: the caller that
    spent the most time in them, followed up until a caller is Landfall's or a library's."""
    stats: Any = vars(pstats.Stats(profile))["stats"]  # {(file, line, name): (cc, nc, tottime, cumtime, callers)}
    resolved: dict[Any, str] = {}

    def resolve(key: Any, depth: int = 0) -> str:
        if key in resolved:
            return resolved[key]
        mine = owner(key[0])
        if mine == STDLIB and depth < 12:
            callers = stats.get(key, (0, 0, 0.0, 0.0, {}))[4]
            if callers:
                top = max(callers.items(), key=lambda kv: kv[1][2] if isinstance(kv[1], tuple) else 0)[0]
                mine = resolve(top, depth + 1)
        resolved[key] = mine
        return mine

    totals: dict[str, float] = {}
    for key, (_cc, _nc, tottime, _cum, _callers) in stats.items():
        who = resolve(key)
        totals[who] = totals.get(who, 0.0) + tottime
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=60, help="requests measured (default 60)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    if args.requests < 5:
        parser.error(f"--requests must be at least 5, got {args.requests}")
    with noop_stack() as s:
        one_drop(s, "warm-000", COLD_ENDED_WITHIN_S)
        request = dict(s.runs()[0].request)
        from functions.dispatch.handler import handle_training_request
        from functions.envelopes import PubSubMessage
        from functions.wiring import dispatch_deps

        # The per-region submission slot is still taken (its transaction is part of each request's CPU); only its
        # spacing, wall time that costs no CPU, is lifted so the bench does not wait 1.2 s a request.
        os.environ["LANDFALL_VERTEX_CREATE_PER_MINUTE"] = "100000"
        deps = dispatch_deps()

        def delivery(i: int) -> PubSubMessage:
            run_id = f"cpu-{uuid.uuid4().hex[:16]}"
            body = {**request, "run_id": run_id, "idempotency_key": run_id}
            return PubSubMessage(data=json.dumps(body).encode(), message_id=f"bench-{i}")

        outcomes: dict[str, int] = {}
        for i in range(3):  # the first calls build the clients and open their channels
            handle_training_request(delivery(i), deps)
        before = machine()
        cpu_ms: list[float] = []
        for i in range(args.requests):
            message = delivery(i)
            start = time.process_time()
            outcome = handle_training_request(message, deps)
            cpu_ms.append((time.process_time() - start) * 1000)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        profile = cProfile.Profile(time.process_time)
        for i in range(args.requests):
            message = delivery(i)
            profile.enable()
            handle_training_request(message, deps)
            profile.disable()
        after = machine()
    shares = split(profile)
    total = sum(shares.values())
    median = statistics.median(cpu_ms)
    print(
        f"dispatcher CPU per request, in process ({args.requests} requests, {before['nproc']} CPUs, "
        f"load {before['load_average']} -> {after['load_average']}): median {median:.1f} ms, "
        f"mean {statistics.fmean(cpu_ms):.1f} ms, min {min(cpu_ms):.1f} ms; outcomes {outcomes}"
    )
    print("where it goes (cProfile, CPU clock; each share applied to the unprofiled median):")
    for key, seconds in sorted(shares.items(), key=lambda kv: -kv[1]):
        print(f"  {key:34s} {100 * seconds / total:5.1f} %  ~{median * seconds / total:5.1f} ms")
    floor = median * shares.get("client libraries", 0.0) / total
    met = median <= TARGET_MS
    print(
        f"client libraries' floor for the same calls: ~{floor:.1f} ms; "
        f"target <= {TARGET_MS:g} ms: {'met' if met else 'NOT met'}"
    )
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "requests": args.requests,
                    "cpu_ms_median": median,
                    "cpu_ms_mean": statistics.fmean(cpu_ms),
                    "cpu_ms": cpu_ms,
                    "shares": {k: v / total for k, v in shares.items()},
                    "library_floor_ms": floor,
                    "outcomes": outcomes,
                    "machine_before": before,
                    "machine_after": after,
                },
                indent=2,
            )
        )
    return 0 if met and set(outcomes) == {"submitted"} else 1


if __name__ == "__main__":
    sys.exit(main())
