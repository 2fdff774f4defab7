"""Plans that learn: a first run planned from the model, then the same workload planned from what the first one
measured: again as it was, on another process count, and on twice the data; each one's estimate beside its actual
duration.

    .venv/bin/python bench/learning_bench.py [--rows 250] [--shards 16] [--timeout 600]

Runs on a fresh local stack of its own (a temporary state folder, every service on a free port): the Pub/Sub,
Firestore and GCS emulators, the functions, and the Vertex emulator running the built-in trainer on this machine's
CPU. It uploads one CSV dataset and publishes a TrainingRequest for it; the dispatcher plans it from the model
(nothing is measured yet), the trainer runs, and the listener records what the run measured (step time, samples per
second, peak memory, start-up) in the `measurements` collection. It then publishes the same request again (another
idempotency key): the same workload, so the dispatcher reads the first run's figures and the planner plans from them.
Run 3 is the same workload on another machine type with twice the GPUs (--other-machine-type: twice the processes,
DDP; a CPU-only machine type trains one process, so the process count changes with GPUs), run 4 the same workload on
twice the data (another prefix, twice the shards; the workload key leaves the data's size out):
each planned from what the runs before it measured. Every request pins the machine type (--machine-type), since the
Vertex emulator runs every machine type on this machine's CPU. Prints each run's estimate, actual duration (the job's
end - its start, as Vertex reports them) and error; exit status 1 when run 2's estimate is more than 15 % from its
actual duration, run 3's or run 4's more than 20 % (the targets), or a run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from deploy.local import stack  # noqa: E402
from deploy.topology import load_topology  # noqa: E402
from schemas.measurement import parse_measurement  # noqa: E402
from schemas.run_record import TERMINAL_STATES, RunRecord, RunState, parse_run_record  # noqa: E402
from schemas.training_request import run_id_for  # noqa: E402

TARGETS = {2: 0.15, 3: 0.20, 4: 0.20}
"""Each learned run's estimate within this fraction of its actual duration: the same workload again (run 2), on
another process count (run 3), on twice the data (run 4)."""
WHAT = {
    1: "as requested",
    2: "the same again",
    3: "on twice the GPUs (twice the processes)",
    4: "on twice the data",
}
START_TRIES = 3


def _wait(what: str, timeout: float, probe: Any) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        time.sleep(1.0)
    raise TimeoutError(f"{what} within {timeout:.0f} s")


def _run(firestore: Any, collection: str, run_id: str, timeout: float) -> RunRecord:
    ref = firestore.collection(collection).document(run_id)
    _wait(f"run {run_id} to be recorded (see the stack's logs/dispatch.log)", 120, lambda: ref.get().exists or None)

    def ended() -> RunRecord | None:
        snap = ref.get()
        record = parse_run_record(snap.to_dict()) if snap.exists else None
        return record if record is not None and record.state in TERMINAL_STATES else None

    record: RunRecord = _wait(f"run {run_id} to end", timeout, ended)
    return record


def _upload(storage: Any, bucket_name: str, prefix: str, shards: list[str]) -> int:
    """The shards, outside every ingest route (no run is requested for them: the benchmark publishes its own);
    their bytes."""
    bucket = storage.bucket(bucket_name)
    for i, text in enumerate(shards):
        bucket.blob(f"{prefix}part-{i:05d}.csv").upload_from_string(text, content_type="text/csv")
    return sum(len(text.encode()) for text in shards)


def _request(bucket: str, prefix: str, size: tuple[int, int], key: str, machine_type: str) -> dict[str, Any]:
    """The default route's request (deploy/routes.toml) for the dataset (its bytes and objects, as ingest gives
    them), on one pinned machine type: the Vertex emulator runs every machine type on this machine's CPU, so only the
    measured shape tells the truth here."""
    constraints: dict[str, Any] = {"machine_type": machine_type, "spot": "never"}
    return {
        "idempotency_key": key,
        "dataset": {"uri": f"gs://{bucket}/{prefix}", "total_bytes": size[0], "object_count": size[1]},
        "task": "tabular-classification",
        "model": {"preset": "mlp-small", "label_column": "label"},
        "hyperparameters": {"epochs": 10, "batch_size": 64, "learning_rate": 0.01},
        "constraints": constraints,
    }


def _line(n: int, run: RunRecord) -> tuple[str, float]:
    plan = run.plan
    assert plan is not None and run.timings.run_seconds is not None
    estimate, actual = plan.estimated_hours * 3600.0, run.timings.run_seconds
    basis = "measured figures" if any(a.startswith("measured") for a in plan.assumptions) else "the model"
    error = (estimate - actual) / actual
    return (
        f"run {n} {run.run_id}: {WHAT[n]}, planned from {basis}: {plan.replica_count} x {plan.machine_type}  "
        f"estimate {estimate:8.1f} s  actual {actual:7.1f} s  error {error:+7.1%}",
        error,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=250, help="rows per CSV shard (default 250, as `landfall demo`)")
    parser.add_argument(
        "--shards", type=int, default=16, help="CSV shards (default 16: 4,000 rows, a run of a few hundred steps)"
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds each run may take (default 600)")
    parser.add_argument(
        "--machine-type",
        default="g2-standard-12",
        help="the machine type runs 1, 2 and 4 pin (default g2-standard-12: one L4, one process)",
    )
    parser.add_argument(
        "--other-machine-type",
        default="g2-standard-24",
        help="the machine type run 3 pins: another process count (default g2-standard-24: two L4, two processes)",
    )
    ns = parser.parse_args()
    from deploy.local.processes import StackError
    from landfall.synthetic import separable_csv_shards

    topology = load_topology()
    saved = dict(os.environ)
    for key in [k for k in os.environ if k.startswith(("LANDFALL_", "PUBSUB_", "FIRESTORE_", "STORAGE_"))]:
        del os.environ[key]
    load = os.getloadavg()
    print(
        f"learning benchmark: local stack (emulators, functions, Vertex emulator running the built-in trainer on "
        f"CPU), {os.cpu_count()} CPUs, load average {load[0]:.2f}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="landfall-learn-bench-") as tmp:
        state = Path(tmp)
        started = time.monotonic()
        for attempt in range(1, START_TRIES + 1):
            try:
                info = stack.up(state, {name: 0 for name in topology.local_ports})
                break
            except StackError as exc:
                if "in use" not in str(exc) or attempt == START_TRIES:
                    raise
        print(f"stack up in {time.monotonic() - started:.1f} s", flush=True)
        try:
            os.environ.update(info.env)
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import firestore, storage

            fs = firestore.Client(project=topology.project_id)
            gcs = storage.Client(project=topology.project_id, credentials=AnonymousCredentials())
            bucket = info.env["LANDFALL_LANDING_BUCKET"]
            from google.cloud import pubsub_v1

            prefix, double = "bench-learn/data/", "bench-learn/twice/"
            shards = separable_csv_shards(shards=ns.shards, rows_per_shard=ns.rows)
            size = (_upload(gcs, bucket, prefix, shards), len(shards))
            twice = separable_csv_shards(shards=2 * ns.shards, rows_per_shard=ns.rows)
            twice_size = (_upload(gcs, bucket, double, twice), len(twice))
            publisher = pubsub_v1.PublisherClient()
            topic = publisher.topic_path(topology.project_id, topology.requests_topic)
            errors: dict[int, float] = {}
            for n in (1, 2, 3, 4):
                key = f"learning-bench-{time.time_ns()}-{n}"
                request = _request(
                    bucket,
                    double if n == 4 else prefix,
                    twice_size if n == 4 else size,
                    key,
                    ns.other_machine_type if n == 3 else ns.machine_type,
                )
                body = json.dumps(request).encode()
                publisher.publish(topic, body).result(timeout=60)
                run = _run(fs, topology.runs_collection, run_id_for(key), ns.timeout)
                run_id = run.run_id
                if run.state != RunState.SUCCEEDED:
                    reason = run.error.message if run.error else "no reason recorded"
                    print(f"run {n} {run_id} ended {run.state.value}: {reason} (logs in {state}/logs)")
                    return 1
                text, error = _line(n, run)
                print(text, flush=True)
                metrics = run.metrics or {}
                print(
                    f"  trainer: {metrics.get('steps')} steps of {metrics.get('step_seconds') or 0:.4g} s, "
                    f"load average {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
                errors[n] = error
                # the listener records the figures after the run's SUCCEEDED: the next run is planned from them

                def measured(rid: str = run_id) -> Any:
                    docs = fs.collection(topology.measurements_collection).stream()
                    found = [parse_measurement(d.to_dict()) for d in docs]
                    return next((m for m in found if m.run_id == rid), None)

                m = _wait(f"run {n}'s measurement", 60, measured)
                if n == 1:
                    print(
                        f"  measured: step {m.step_seconds:.4g} s, {m.samples_per_second:,.0f} samples/s, peak "
                        f"{m.peak_memory_gib:.2f} GiB, start-up {m.startup_seconds:.1f} s, {m.steps} steps where the "
                        f"model counted {m.modelled_steps}",
                        flush=True,
                    )
                else:
                    notes = (
                        [a for a in run.plan.assumptions if a.startswith(("measured", "modelled"))] if run.plan else []
                    )
                    for note in notes:
                        print(f"  {note}")
        finally:
            stack.down(state, wipe=True)
            os.environ.clear()
            os.environ.update(saved)
    print(f"run 1's error {errors[1]:+.1%} (the model)")
    missed = 0
    for n, target in TARGETS.items():
        met = abs(errors[n]) <= target
        missed += not met
        verdict = "met" if met else "NOT met"
        print(f"run {n} ({WHAT[n]}): error {errors[n]:+.1%}, target |error| <= {target:.0%}: {verdict}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
