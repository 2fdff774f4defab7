"""Dashboard benchmark: the runs page's first load, its next page and each filter with 10,000 runs.

    .venv/bin/python bench/ui_bench.py [--runs 10000] [--tries 5]      (or: make bench-ui)

It starts a Firestore emulator of its own, writes --runs small valid run records in batched writes (the documents
the browser tests seed, tests/fakes/ui.py: states, five teams and twenty datasets in turn, a second apart), serves
the dashboard (landfall/ui/, the CLI's own Firestore reads) with uvicorn on a free port, and asks for each page over
HTTP --tries times: the whole answer, from the request to the last byte of rendered HTML (the Firestore query with its
cursor or filters, the records read through their schema, the template). It prints the median and the slowest of
each. The first request of all (the emulator's JVM and the client's channel cold) is printed apart as "cold".

Target: every page's median under 1 s (exit 1 otherwise). The browser tests (tests/integration/test_ui_browser.py)
time the same pages in Chromium, rendering included.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deploy.local import processes, services

PROJECT = "landfall-local"
TARGET_S = 1.0
BATCH = 500


def _get(url: str) -> float:
    began = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as answer:
        answer.read()
        if answer.status != 200:
            raise SystemExit(f"{url} answered {answer.status}")
    return time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--tries", type=int, default=5)
    args = parser.parse_args()
    port = processes.free_port()
    emulator = processes.start(services.firestore(port), Path(tempfile.mkdtemp(prefix="ui-bench-")))
    os.environ.update({"FIRESTORE_EMULATOR_HOST": f"{services.HOST}:{port}", "GOOGLE_CLOUD_PROJECT": PROJECT})
    os.environ.pop("LANDFALL_VERTEX_ENDPOINT", None)
    try:
        from datetime import timedelta

        from google.cloud import firestore

        from deploy.topology import load_topology
        from landfall.ui.app import create_app
        from landfall.ui.source import LandfallSource
        from tests import browser
        from tests.fakes.ui import TEAMS, seeded
        from tests.fakes.world import NOW

        client = firestore.Client(project=PROJECT)
        runs = client.collection(load_topology().runs_collection)
        began = time.perf_counter()
        for start in range(0, args.runs, BATCH):
            batch = client.batch()
            for index in range(start, min(start + BATCH, args.runs)):
                doc = seeded(index)
                batch.set(runs.document(doc["run_id"]), doc)
            batch.commit()
        print(f"seeded {args.runs} runs in {time.perf_counter() - began:.1f} s (batched writes of {BATCH})")
        since = (NOW - timedelta(seconds=300)).strftime("%Y-%m-%dT%H:%M:%SZ")
        pages = {
            "first load": "/runs",
            "next page": "/runs?after=run-seed-00049",
            "page 100": f"/runs?after=run-seed-{min(args.runs - 1, 4949):05d}",
            "state": "/runs?state=FAILED",
            "team": f"/runs?team={TEAMS[2]}",
            "dataset": "/runs?dataset=gs://landfall-landing/datasets/seed-7/",
            "state and team": f"/runs?state=FAILED&team={TEAMS[1]}",
            "state, dataset, team": f"/runs?state=RUNNING&dataset=gs://landfall-landing/datasets/seed-2/&team={TEAMS[2]}",
            "since": f"/runs?since={since}",
            "rows (live update)": "/runs/rows",
            "a run": "/runs/run-seed-00003",
        }
        with browser.served(create_app(LandfallSource(), frozenset())) as base:
            print(f"cold (first request after start): {_get(base + '/runs'):.3f} s")
            missed = []
            print(f"{'PAGE':<22} {'MEDIAN S':>9} {'MAX S':>7}  ({args.tries} tries each, {args.runs} runs)")
            for name, path in pages.items():
                times = [_get(base + path) for _ in range(args.tries)]
                median = statistics.median(times)
                print(f"{name:<22} {median:>9.3f} {max(times):>7.3f}")
                if median >= TARGET_S:
                    missed.append(name)
    finally:
        processes.stop(emulator)
    if missed:
        print(f"missed the {TARGET_S:g} s target: {', '.join(missed)}")
        return 1
    print(f"every page under {TARGET_S:g} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
