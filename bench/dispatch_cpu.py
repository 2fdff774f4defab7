"""The dispatcher's CPU per request, and how much of it the client libraries spend on the same calls.

    .venv/bin/python bench/dispatch_cpu.py [--requests 60] [--out FILE.json]

Starts a local stack of its own (bench/local_stack: free ports, a temporary state folder, the trainer a no-op),
drops one dataset to warm it, then hands --requests TrainingRequests for that dataset (each its own run) to the
dispatcher's handler in this process, built as the deployed function builds it (functions.wiring.dispatch_deps,
the same clients against the same emulators): create the run, check the dataset on the list its request carries
(reading the first CSV shard's header), plan (the measurements query), the claim with the per-region submission
slot (one conditional Commit on the run it created), CreateCustomJob, the job recorded (one conditional Commit).

It prints:
- CPU per request (user + system of this process, `time.process_time`, around each call; the median and mean):
  the target is at most 15 ms. The load test's figure (docs/benchmarks.md) also counts the
  functions-framework server that receives the push (HTTP, CloudEvent parsing), which this leaves out.
- The floor itself, measured: the same six calls made straight through the same clients with documents of a few
  fields (`Floor`), one round after each request so that both see the same machine load: what any dispatcher that
  makes these calls spends, whatever it writes; and the ratio of the two.
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.latency import COLD_ENDED_WITHIN_S, one_drop  # noqa: E402
from bench.local_stack.harness import noop_stack, trainer_image  # noqa: E402
from bench.local_stack.report import machine  # noqa: E402

TARGET_MS = 15.0
BENCH_TEAMS = REPO / "bench" / "local_stack" / "bench_teams.toml"
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


class Floor:
    """One round of the dispatcher's calls made with tiny documents through the same clients the dispatcher uses
    (functions/gcp/clients.py), against the same emulators: the run's create (Commit), the label object's read
    (Cloud Storage JSON API: a request from ingest carries its version's list, so the dataset is not listed), the
    measurements query (RunQuery), the claim with the submission slot's two writes (one conditional Commit),
    CreateCustomJob, and the job's record (one conditional Commit)."""

    CALLS = 6
    """With --teams, 7: the claim is the team ledger's read, then one Commit of the run, the ledger and the slot, each
    conditional (functions/gcp/team_ledger_store.py)."""

    def __init__(self, region: str, bucket: str, image: str, *, teams: bool = False) -> None:
        from google.cloud.firestore_v1.base_query import FieldFilter

        from functions.gcp import clients

        self.db = clients.firestore_client()
        self.gcs = clients.storage_client()
        self.jobs = clients.job_service_client(region)
        self.parent = f"projects/{self.db.project}/locations/{region}"
        self.bucket = bucket
        self.collection = self.db.collection("bench_floor")
        self.slot = self.collection.document("slot")
        self.slot.set({"next_slot_us": 0})
        self.query = self.collection.where(filter=FieldFilter("n", "==", -1)).limit(20)
        self.custom_job = {
            "display_name": "bench-floor",
            "job_spec": {
                "worker_pool_specs": [
                    {
                        "machine_spec": {"machine_type": "n1-standard-4"},
                        "replica_count": 1,
                        "container_spec": {"image_uri": image, "args": ["--floor"]},
                    }
                ]
            },
        }
        self.teams = teams
        self.ledger = self.collection.document("ledger")
        self.ledger.set({"reserved": 0})
        self.by_call: dict[str, float] = {}
        self.rounds = 0
        for _ in self.steps(-1):  # channels open
            pass

    def steps(self, i: int) -> Iterator[str]:
        """Each call, named after it is made (the caller times the gaps)."""
        from google.cloud import firestore

        ref = self.collection.document(f"run-{uuid.uuid4().hex[:16]}")
        made = ref.create({"state": "RECEIVED", "n": i})
        yield "run create (Commit)"
        self.gcs.bucket(self.bucket).blob("datasets/warm-000/part-00000.csv").download_as_bytes()
        yield "label object read (GCS JSON API)"
        list(self.query.stream())
        yield "measurements query (RunQuery)"
        if self.teams:
            seen = self.ledger.get()
            batch = self.db.batch()
            batch.update(ref, {"state": "SUBMITTING"}, option=self.db.write_option(last_update_time=made.update_time))
            reserved = (seen.to_dict() or {}).get("reserved", 0) + 1
            batch.update(
                self.ledger, {"reserved": reserved}, option=self.db.write_option(last_update_time=seen.update_time)
            )
            batch.set(self.slot, {"next_slot_us": firestore.Maximum(i)}, merge=True)
            batch.update(self.slot, {"next_slot_us": firestore.Increment(1)})
            made = batch.commit()[0]
            yield "claim: the team's ledger read, then one conditional Commit (run, ledger, slot)"
        else:
            batch = self.db.batch()
            batch.update(ref, {"state": "SUBMITTING"}, option=self.db.write_option(last_update_time=made.update_time))
            batch.set(self.slot, {"next_slot_us": firestore.Maximum(i)}, merge=True)
            batch.update(self.slot, {"next_slot_us": firestore.Increment(1)})
            made = batch.commit()[0]
            yield "claim with the submission slot (conditional Commit, three writes)"
        self.jobs.create_custom_job(parent=self.parent, custom_job=self.custom_job)
        yield "CreateCustomJob"
        ref.update({"state": "SUBMITTED"}, option=self.db.write_option(last_update_time=made.update_time))
        yield "job recorded (conditional Commit)"

    def round(self, i: int) -> float:
        """CPU ms of one round."""
        self.rounds += 1
        start = last = time.process_time()
        for name in self.steps(i):
            now = time.process_time()
            self.by_call[name] = self.by_call.get(name, 0.0) + (now - last) * 1000
            last = now
        return (time.process_time() - start) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=60, help="requests measured (default 60)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--profile", type=Path, help="write the cProfile pass's stats here (pstats format)")
    parser.add_argument(
        "--teams",
        action="store_true",
        help="the requests' data owned by a team (bench/local_stack/bench_teams.toml, caps that never bind), as in "
        "`make load`: the claim goes through the team ledger's transaction",
    )
    args = parser.parse_args()
    if args.requests < 5:
        parser.error(f"--requests must be at least 5, got {args.requests}")
    # The per-region submission slot is still taken (its writes are part of each request's CPU); only its spacing,
    # wall time that costs no CPU, is lifted, here and in the stack's functions (the listener's model registrations
    # take their slots from the same bucket), so no delivery sleeps for a slot: the CPU other threads spend meanwhile
    # would count in its figure.
    lifted = {"LANDFALL_VERTEX_CREATE_PER_MINUTE": "100000"}
    with noop_stack(env=lifted) as s:
        one_drop(s, "warm-000", COLD_ENDED_WITHIN_S)
        request = dict(s.runs()[0].request)
        from functions.dispatch.handler import handle_training_request
        from functions.envelopes import PubSubMessage
        from functions.wiring import dispatch_deps

        os.environ.update(lifted)
        if args.teams:
            os.environ["LANDFALL_TEAMS_FILE"] = str(BENCH_TEAMS)
        from functions.settings import get_settings

        get_settings.cache_clear()  # read on first use: the stack's start read them before the lines above
        deps = dispatch_deps()
        if deps.limiter is None or deps.limiter.per_minute != 100000:
            raise SystemExit("the bench's limiter spacing was not lifted: a delivery would wait for its slot")
        if args.teams and deps.teams is None:
            raise SystemExit(f"--teams: the dispatcher read no teams from {BENCH_TEAMS}")

        # With --teams, on the team's own topic, as its members publish (bench_teams.toml).
        topic = f"projects/{deps.settings.project}/topics/landfall-requests-bench" if args.teams else ""

        def delivery(i: int) -> PubSubMessage:
            run_id = f"cpu-{uuid.uuid4().hex[:16]}"
            body = {**request, "idempotency_key": run_id}
            return PubSubMessage(data=json.dumps(body).encode(), message_id=f"bench-{i}", topic=topic)

        outcomes: dict[str, int] = {}
        for i in range(3):  # the first calls build the clients and open their channels
            handle_training_request(delivery(i), deps)
        region = os.environ.get("LANDFALL_DEFAULT_REGION", s.topology.default_region)
        floor = Floor(region, s.topology.bucket, trainer_image(s.topology), teams=args.teams)
        before = machine()
        cpu_ms: list[float] = []
        floor_ms: list[float] = []
        for i in range(args.requests):  # a request, then a round of the floor: both see the same machine load
            message = delivery(i)
            start = time.process_time()
            outcome = handle_training_request(message, deps)
            cpu_ms.append((time.process_time() - start) * 1000)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            floor_ms.append(floor.round(i))
        profile = cProfile.Profile(time.process_time)
        for i in range(args.requests):
            message = delivery(i)
            profile.enable()
            handle_training_request(message, deps)
            profile.disable()
        by_call = {name: ms / floor.rounds for name, ms in floor.by_call.items()}
        after = machine()
    if args.profile:
        profile.dump_stats(args.profile)
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
    library_share = median * shares.get("client libraries", 0.0) / total
    measured_floor = statistics.median(floor_ms)
    met = median <= TARGET_MS
    print(
        f"client libraries' share of these calls, with Landfall's documents: ~{library_share:.1f} ms; "
        f"target <= {TARGET_MS:g} ms: {'met' if met else 'NOT met'}"
    )
    print(
        f"the floor, the same {Floor.CALLS + args.teams} calls with documents of a few fields, interleaved with "
        "the requests: "
        f"median {measured_floor:.1f} ms, min {min(floor_ms):.1f} ms; dispatcher / floor "
        f"{median / measured_floor:.2f}; by call (mean ms per request):"
    )
    for name, ms in by_call.items():
        print(f"  {name:66s} {ms:5.1f}")
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "requests": args.requests,
                    "teams": args.teams,
                    "cpu_ms_median": median,
                    "cpu_ms_mean": statistics.fmean(cpu_ms),
                    "cpu_ms": cpu_ms,
                    "shares": {k: v / total for k, v in shares.items()},
                    "library_floor_ms": library_share,
                    "floor_pass_ms_median": measured_floor,
                    "floor_pass_ms": floor_ms,
                    "floor_pass_by_call_ms": by_call,
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
