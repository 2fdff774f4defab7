"""2 nodes x 2 processes on CPU through the Vertex emulator: the CustomJob the dispatcher would submit SUCCEEDS,
and every one of the 4 ranks ends with identical weights. Data and outputs live on fake-gcs-server."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import pytest
import torch
from google.cloud import aiplatform_v1, pubsub_v1

from tests import datagen
from tests.integration.vertex_emulator.harness import PARENT, PROJECT, job_id, launch_emulator


@pytest.fixture()
def bucket(gcs_emulator):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(project=PROJECT, credentials=AnonymousCredentials())
    return client.create_bucket(f"trainer-2x2-{uuid.uuid4().hex[:8]}")


@pytest.fixture()
def vertex(pubsub_emulator, gcs_emulator, tmp_path: Path):
    topic = f"trainer-job-events-{uuid.uuid4().hex[:8]}"
    pubsub_v1.PublisherClient().create_topic(name=f"projects/{PROJECT}/topics/{topic}")
    emulator = launch_emulator(tmp_path / "state", tmp_path / "emulator.log", ["--events-topic", topic])
    yield emulator
    emulator.stop()


def _records(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


def test_two_nodes_two_processes_each_succeed_with_identical_weights(vertex, bucket) -> None:
    for shard in range(3):
        bucket.blob(f"data/part-{shard}.csv").upload_from_string(datagen.csv_text(datagen.separable_rows(500, shard)))
    bucket.blob("data/_SUCCESS").upload_from_string("")
    args = [
        f"--data-uri=gs://{bucket.name}/data/",
        "--task=tabular-classification",
        "--model=mlp-small",
        "--epochs=3",
        "--batch-size=16",
        "--learning-rate=0.01",
        "--seed=11",
        "--strategy=ddp",
        "--precision=auto",
        "--label-column=label",
        "--checkpoint-every=20",
        "--hparam=min_steps=0",  # the 3 epochs asked for: the small-table floor (300 steps) tests nothing here
    ]
    package = {
        "executor_image_uri": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest",
        "package_uris": [f"gs://{bucket.name}/landfall/trainer-0.1.0.tar.gz"],
        "python_module": "trainer.task",
        "args": args,
        "env": [{"name": "LANDFALL_NPROC_PER_NODE", "value": "2"}],
    }
    pool = {"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1, "python_package_spec": package}
    job = vertex.client.create_custom_job(
        parent=PARENT,
        custom_job={
            "display_name": "trainer-2x2",
            "job_spec": {
                "worker_pool_specs": [pool, pool],
                "base_output_directory": {"output_uri_prefix": f"gs://{bucket.name}/run"},
            },
        },
    )

    done = vertex.wait_terminal(job.name, timeout=240)
    logs = vertex.state_dir / "jobs" / job_id(job)
    assert done.state == aiplatform_v1.JobState.JOB_STATE_SUCCEEDED, (
        done.error.message + "\n" + "\n".join(p.read_text()[-3000:] for p in sorted(logs.glob("*.log")))
    )

    finished = [
        r for p in sorted(logs.glob("workerpool*.log")) for r in _records(p) if r.get("message") == "training finished"
    ]
    assert sorted(r["rank"] for r in finished) == [0, 1, 2, 3]
    assert {r["world_size"] for r in finished} == {4}
    digests = {r["weights_sha256"] for r in finished}
    assert len(digests) == 1 and None not in digests

    metrics = json.loads(bucket.blob("run/model/metrics.json").download_as_bytes())
    assert metrics["world_size"] == 4 and metrics["strategy"] == "ddp"
    assert metrics["final"]["accuracy"] >= 0.95
    weights = torch.load(io.BytesIO(bucket.blob("run/model/model.pt").download_as_bytes()), weights_only=True)
    assert set(weights) >= {"head.weight", "feature_mean", "feature_std"}
