"""What the local stack's storage gate (deploy/local_iam/storage_gate.py) adds to a Cloud Storage call.

    .venv/bin/python bench/storage_gate.py [--calls 300] [--mib 64]

Starts fake-gcs-server (in memory, free port) and the gate in this process, then times the same calls through the
google-cloud-storage client three ways: straight to fake-gcs-server, through the gate as the owner (passed through
unchecked), and through the gate as a team's trainer identity (each call checked, its grant's CEL condition
evaluated): a small object's download, a small upload that replaces an object (which also checks
storage.objects.delete, and so asks fake-gcs-server whether the object exists), a list under a prefix; then a large
object's upload and download (MB/s).

It prints the median and p90 of each small call and the gate's added median; the target is at most 5 ms added per
checked call at the median, and a large download through the gate at least half as fast as without it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from deploy.gcp.config import load_deploy_config  # noqa: E402
from deploy.local import processes, services  # noqa: E402
from deploy.local_iam.policy import deployed_policy, local_names  # noqa: E402
from deploy.local_iam.storage_gate import GateServer  # noqa: E402
from deploy.teams import parse_teams  # noqa: E402
from deploy.topology import load_topology, storage_as  # noqa: E402

TARGET_ADDED_MS = 5.0
TARGET_LARGE_RATIO = 0.5
LANDING, CODE, ARTIFACTS = "bench-landing", "bench-code", "bench-artifacts"
TEAM = "bench-team"


def _client(endpoint: str) -> Any:
    from google.cloud import storage

    os.environ["STORAGE_EMULATOR_HOST"] = endpoint
    return storage.Client(project=load_topology().project_id)


def _calls(client: Any) -> dict[str, Callable[[int], object]]:
    """The small calls timed, each given its index."""
    land, art = client.bucket(LANDING), client.bucket(ARTIFACTS)

    def download(i: int) -> object:
        return land.blob(f"data/part-{i % 20}.csv").download_as_bytes()

    def replace(i: int) -> object:
        return art.blob(f"runs/{TEAM}/r/m-{i % 5}").upload_from_string(b"x" * 1024)

    def listed(i: int) -> object:
        return list(client.list_blobs(LANDING, prefix="data/"))

    return {"download 1 KiB": download, "replace 1 KiB": replace, "list 20": listed}


def _times(call: Callable[[int], object], n: int) -> list[float]:
    out = []
    for i in range(n):
        start = time.perf_counter()
        call(i)
        out.append((time.perf_counter() - start) * 1000.0)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--mib", type=int, default=64)
    args = parser.parse_args()
    topology, config = load_topology(), load_deploy_config()
    teams = parse_teams(
        {
            "schema_version": 1,
            "teams": [{"name": TEAM, "owns": [{"bucket": "*", "prefix": "data/"}], "monthly_budget_usd": 1.0}],
        }
    )
    names = local_names(topology, config, {"us-central1": ARTIFACTS}, LANDING, CODE)
    policy = deployed_policy(config, names, teams, topology.runs_prefix)
    port = processes.free_port()
    spec = services.storage(port, project=topology.project_id, notification_topic=None, bucket=None, pubsub_host=None)
    service = processes.start(spec, Path(tempfile.mkdtemp(prefix="bench-gate-")))
    direct = f"http://{services.HOST}:{port}"
    gate = GateServer(0, direct, lambda: policy, quiet=True)
    threading.Thread(target=gate.serve_forever, daemon=True).start()
    member = f"serviceAccount:lf-team-{TEAM}@{topology.project_id}.iam.gserviceaccount.com"
    try:
        owner = _client(direct)
        for bucket in (LANDING, CODE, ARTIFACTS):
            owner.create_bucket(bucket)
        for i in range(20):
            owner.bucket(LANDING).blob(f"data/part-{i}.csv").upload_from_string(b"a,b\n" * 256)
        ways = {"direct": direct, "gate, owner": gate.base, "gate, checked": storage_as(gate.base, member)}
        rows: dict[str, dict[str, list[float]]] = {}
        for way, endpoint in ways.items():
            client = _client(endpoint)
            calls = _calls(client)
            for call in calls.values():
                _times(call, 10)  # warm the connection pool and the gate's condition cache
            rows[way] = {name: _times(call, args.calls) for name, call in calls.items()}
        big = os.urandom(args.mib << 20)
        rates: dict[str, tuple[float, float]] = {}
        for way, endpoint in (("direct", direct), ("gate, checked", storage_as(gate.base, member))):
            blob = _client(endpoint).bucket(ARTIFACTS).blob(f"runs/{TEAM}/big-{way[:4]}")
            start = time.perf_counter()
            blob.upload_from_string(big)
            up = time.perf_counter() - start
            start = time.perf_counter()
            assert blob.download_as_bytes() == big
            down = time.perf_counter() - start
            rates[way] = (args.mib / up, args.mib / down)
    finally:
        gate.shutdown()
        processes.stop(service)
    print(f"{'call':<16} {'way':<14} {'median ms':>10} {'p90 ms':>8}")
    worst = 0.0
    for name in rows["direct"]:
        for way in ways:
            times = sorted(rows[way][name])
            print(f"{name:<16} {way:<14} {statistics.median(times):>10.2f} {times[int(0.9 * len(times))]:>8.2f}")
        added = statistics.median(rows["gate, checked"][name]) - statistics.median(rows["direct"][name])
        worst = max(worst, added)
        print(f"{name:<16} {'added':<14} {added:>10.2f}")
    for way, (up, down) in rates.items():
        print(f"{args.mib} MiB {way:<14} upload {up:8.1f} MB/s, download {down:8.1f} MB/s")
    ratio = rates["gate, checked"][1] / rates["direct"][1]
    ok = worst <= TARGET_ADDED_MS and ratio >= TARGET_LARGE_RATIO
    print(
        f"gate adds at most {worst:.2f} ms per checked call at the median (target <= {TARGET_ADDED_MS}); large "
        f"download at {ratio:.2f} of direct (target >= {TARGET_LARGE_RATIO}): {'ok' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
