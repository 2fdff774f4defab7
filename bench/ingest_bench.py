"""Ingest benchmark: notifications per second the ingest handler sustains against the emulators.

    .venv/bin/python bench/ingest_bench.py [--data 2000] [--duplicates 500] [--datasets 100] [--workers 8]

Starts its own Pub/Sub and Firestore emulators and fake-gcs-server on free ports, then drives
`functions.ingest.handler.handle_object_event` with the production wiring (functions.wiring.ingest_deps:
google-cloud-storage,
google-cloud-firestore, google-cloud-pubsub) from a pool of worker threads, as a function instance with that much
concurrency would. Three kinds of notification, timed separately:

  data        a shard landing in a marker/manifest dataset (acknowledged before any Firestore or listing call:
              a shard completes no dataset; it once cost one Firestore batch read, "is a manifest waiting on it?")
  duplicate   the same `_SUCCESS` notification redelivered (outbox claim finds the version already published)
  complete    a `_SUCCESS` that completes a 10-object dataset (stat, claim, paged listing, publish, two writes)

Each line prints notifications/s and per-notification latency (p50, p99). The figures depend on the emulators
(Java, on the same machine) far more than on the handler; the load average is printed beside them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deploy.local import processes, provision, services
from deploy.topology import load_topology
from functions.envelopes import ObjectEvent

PROJECT = "landfall-bench"
BUCKET = "landfall-bench-landing"


def start_emulators(log_dir: Path) -> list[processes.RunningService]:
    ports = {name: processes.free_port() for name in ("pubsub", "firestore", "storage")}
    os.environ.update(
        {
            "GOOGLE_CLOUD_PROJECT": PROJECT,
            "PUBSUB_EMULATOR_HOST": f"{services.HOST}:{ports['pubsub']}",
            "FIRESTORE_EMULATOR_HOST": f"{services.HOST}:{ports['firestore']}",
            "STORAGE_EMULATOR_HOST": f"http://{services.HOST}:{ports['storage']}",
            "LANDFALL_LANDING_BUCKET": BUCKET,
        }
    )
    specs = [
        services.pubsub(ports["pubsub"]),
        services.firestore(ports["firestore"]),
        services.storage(ports["storage"], project=PROJECT, notification_topic=None, bucket=None, pubsub_host=None),
    ]
    return processes.start_all(specs, log_dir)


def timed(
    label: str,
    events: list[ObjectEvent],
    handle: Callable[[ObjectEvent], str],
    workers: int,
    expect: Callable[[str], bool],
) -> None:
    latencies: list[float] = []

    def one(event: ObjectEvent) -> str:
        start = time.perf_counter()
        from functions.errors import TransientError

        while True:
            try:
                outcome = handle(event)
                break
            except TransientError:  # what Pub/Sub would redeliver
                time.sleep(0.05)
        latencies.append(time.perf_counter() - start)
        return outcome

    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        outcomes = list(pool.map(one, events))
    elapsed = time.perf_counter() - start
    wrong = [o for o in outcomes if not expect(o)]
    if wrong:
        raise SystemExit(f"{label}: unexpected outcomes {sorted(set(wrong))[:5]}")
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    print(
        f"{label:<10} {len(events):>6} notifications in {elapsed:6.2f} s = {len(events) / elapsed:8.1f} /s   "
        f"latency p50 {statistics.median(ordered) * 1000:8.3f} ms  p99 {p99 * 1000:8.3f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=int, default=2000, help="data-object notifications (default 2000)")
    parser.add_argument("--duplicates", type=int, default=500, help="redelivered marker notifications (500)")
    parser.add_argument("--datasets", type=int, default=100, help="datasets completed by a marker (100)")
    parser.add_argument("--workers", type=int, default=8, help="concurrent handler calls (default 8)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        running = start_emulators(Path(tmp))
        try:
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import storage

            from functions.ingest.handler import handle_object_event
            from functions.wiring import ingest_deps

            provision.create_topics(load_topology(), PROJECT)
            client = storage.Client(project=PROJECT, credentials=AnonymousCredentials())
            bucket = client.create_bucket(BUCKET)
            deps = ingest_deps()

            def event(name: str, generation: int | str) -> ObjectEvent:
                return ObjectEvent(
                    kind="finalize", bucket=BUCKET, name=name, generation=str(generation), event_id="bench"
                )

            def handle(e: ObjectEvent) -> str:
                return handle_object_event(e, deps)

            print(
                f"ingest handler against the emulators: {args.workers} workers, {os.cpu_count()} CPUs, "
                f"load average {os.getloadavg()[0]:.2f}"
            )
            # Datasets to complete: 10 shards each, then the markers (uploaded now; events delivered in the timing).
            markers = []
            with ThreadPoolExecutor(8) as pool:
                names = [f"datasets/bench-{d:04d}/part-{i}.csv" for d in range(args.datasets) for i in range(10)]
                list(pool.map(lambda n: bucket.blob(n).upload_from_string(b"a,label\n1,0\n"), names))

                def put_marker(d: int) -> ObjectEvent:
                    blob = bucket.blob(f"datasets/bench-{d:04d}/_SUCCESS")
                    blob.upload_from_string(b"")
                    return event(blob.name, blob.generation)

                markers = list(pool.map(put_marker, range(args.datasets)))
            data_events = [event(f"datasets/stream-{i % 50:02d}/part-{i:06d}.csv", 10**6 + i) for i in range(args.data)]
            handle(data_events[0])  # warm the clients (first-call cost is a cold start, not throughput)
            timed("data", data_events, handle, args.workers, lambda o: o == "data")
            timed("complete", markers, handle, args.workers, lambda o: o.startswith("published:"))
            dupes = [markers[i % len(markers)] for i in range(args.duplicates)]
            timed("duplicate", dupes, handle, args.workers, lambda o: o == "duplicate:PUBLISHED")
            print(f"load average after: {os.getloadavg()[0]:.2f}")
        finally:
            for service in reversed(running):
                processes.stop(service)
    return 0


if __name__ == "__main__":
    sys.exit(main())
