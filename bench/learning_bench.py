"""Plans that learn: a first run planned from the model, a second run of the same workload planned from what the first
one measured, each one's estimate beside its actual duration.

    .venv/bin/python bench/learning_bench.py [--rows 250] [--shards 16] [--timeout 600]

Runs on a fresh local stack of its own (a temporary state folder, every service on a free port): the Pub/Sub,
Firestore and GCS emulators, the functions, and the Vertex emulator running the built-in trainer on this machine's
CPU. It uploads one CSV dataset and publishes a TrainingRequest for it; the dispatcher plans it from the model
(nothing is measured yet), the trainer runs, and the listener records what the run measured (step time, samples per
second, peak memory, start-up) in the `measurements` collection. It then publishes the same request again (another
idempotency key): the same workload, so the dispatcher reads the first run's figures and the planner plans from them.
Both requests pin the machine type (--machine-type), since the Vertex emulator runs every machine type on this
machine's CPU. Prints both runs' estimates, actual durations (the job's end - its start, as Vertex reports them) and
errors; exit status 1 when the second run's estimate is more than 15 % from its actual duration (the target) or a
run fails.
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

TARGET = 0.15
"""The second run's estimate within 15 % of its actual duration."""
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
    return {
        "idempotency_key": key,
        "dataset": {"uri": f"gs://{bucket}/{prefix}", "total_bytes": size[0], "object_count": size[1]},
        "task": "tabular-classification",
        "model": {"preset": "mlp-small", "label_column": "label"},
        "hyperparameters": {"epochs": 10, "batch_size": 64, "learning_rate": 0.01},
        "constraints": {"machine_type": machine_type, "spot": "never"},
    }


def _line(n: int, run: RunRecord) -> tuple[str, float]:
    plan = run.plan
    assert plan is not None and run.timings.run_seconds is not None
    estimate, actual = plan.estimated_hours * 3600.0, run.timings.run_seconds
    basis = "measured figures" if any(a.startswith("measured") for a in plan.assumptions) else "the model"
    error = (estimate - actual) / actual
    return (
        f"run {n} {run.run_id}: planned from {basis:<16} {plan.machine_type:<14} estimate {estimate:8.1f} s  "
        f"actual {actual:7.1f} s  error {error:+7.1%}",
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
        "--machine-type", default="e2-standard-4", help="the machine type both runs pin (default e2-standard-4)"
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

            prefix = "bench-learn/data/"
            shards = separable_csv_shards(shards=ns.shards, rows_per_shard=ns.rows)
            size = (_upload(gcs, bucket, prefix, shards), len(shards))
            publisher = pubsub_v1.PublisherClient()
            topic = publisher.topic_path(topology.project_id, topology.requests_topic)
            errors: list[float] = []
            for n in (1, 2):
                key = f"learning-bench-{time.time_ns()}-{n}"
                body = json.dumps(_request(bucket, prefix, size, key, ns.machine_type)).encode()
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
                errors.append(error)
                if n == 1:  # the listener records the figures after the run's SUCCEEDED: wait for them

                    def measured(rid: str = run_id) -> list[Any] | None:
                        docs = fs.collection(topology.measurements_collection).stream()
                        found = [parse_measurement(d.to_dict()) for d in docs]
                        return found if any(m.run_id == rid for m in found) else None

                    (m,) = _wait("the first run's measurement", 60, measured)
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
    met = abs(errors[1]) <= TARGET
    print(
        f"first run's error {errors[0]:+.1%} (model); second run's error {errors[1]:+.1%} (measured): "
        f"target |error| <= {TARGET:.0%}: {'met' if met else 'NOT met'}"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
