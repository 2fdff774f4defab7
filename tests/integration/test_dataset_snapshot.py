"""Against the real emulators: a dataset version is a snapshot.

`gcloud storage cp part-0.csv _SUCCESS gs://...` uploads in parallel, so the marker can land before the data. Here
the marker lands first, then a small data object, then a large one after the version was cut, and the small one is
rewritten: ingest (fake-gcs-server, the Firestore outbox, the requests topic with its schema on the Pub/Sub emulator)
records exactly what it measured, the job's trainer arguments carry it, the trainer reads exactly those objects at
those generations, and the run record (Firestore) names them. On the old main the marker was REFUSED as "0 data
objects"; marked after the data, the trainer read every object in the folder, recorded or not."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from deploy.routes import Route
from functions.envelopes import ObjectEvent, PubSubMessage
from functions.gcp.datasets_store import DatasetsStore
from functions.gcp.gcs_objects import GcsObjects
from functions.gcp.runs_store import RunsStore
from functions.gcp.vertex import VertexJobs
from functions.ingest.handler import IngestDeps, handle_object_event
from functions.ingest.sweep import handle_sweep
from functions.job_states import JobStateDeps, read_gcs_text, record_job_state
from functions.settings import settings_from_env
from schemas.data_objects import DataObject, objects_digest
from schemas.dataset_record import DatasetStatus, parse_dataset_record
from schemas.job_view import JobView
from schemas.plan import parse_plan
from schemas.run_record import Artifacts, RunState, VertexJobRef, new_run, parse_run_record
from schemas.times import format_timestamp
from schemas.training_request import TrainingRequest, parse_training_request
from tests import datagen
from tests.conftest import PROJECT, Emulator
from tests.fakes.ingest import T0, Clock
from tests.trainer_runner import run_trainer, trainer_env

pytestmark = pytest.mark.filterwarnings("ignore:The return_immediately flag is deprecated:DeprecationWarning")

ROUTE = Route(
    name="snap",
    bucket="*",
    prefix="datasets/",
    task="tabular-classification",
    model_preset="mlp-small",
    formats=("csv",),
    hyperparameters={"epochs": 1, "batch_size": 16},
)
PLAN = parse_plan(json.loads((Path(__file__).resolve().parents[2] / "schemas/examples/plan_cpu.json").read_text()))
TAP = f"projects/{PROJECT}/subscriptions/snapshot-it-tap"


@pytest.fixture(scope="module")
def storage_client(gcs_emulator: Emulator) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(project=PROJECT, credentials=AnonymousCredentials())


@pytest.fixture(scope="module")
def requests_topic(pubsub_emulator: Emulator) -> Iterator[tuple[str, Any]]:
    """The requests topic as the stack provisions it (with its schema where the emulator takes one) and a tap."""
    from google.cloud import pubsub_v1

    from deploy.local import provision
    from deploy.topology import load_topology

    topology = load_topology()
    provision.create_topics(topology, PROJECT)
    subscriber = pubsub_v1.SubscriberClient()
    subscriber.create_subscription(name=TAP, topic=f"projects/{PROJECT}/topics/{topology.requests_topic}")
    yield f"projects/{PROJECT}/topics/{topology.requests_topic}", subscriber
    subscriber.delete_subscription(subscription=TAP)
    subscriber.close()


def drain(subscriber: Any) -> list[TrainingRequest]:
    out: list[TrainingRequest] = []
    while True:
        response = subscriber.pull(subscription=TAP, max_messages=100, timeout=5, return_immediately=True)
        if not response.received_messages:
            return out
        subscriber.acknowledge(subscription=TAP, ack_ids=[m.ack_id for m in response.received_messages])
        out += [parse_training_request(m.message.data) for m in response.received_messages]


def upload(bucket: Any, name: str, data: bytes) -> ObjectEvent:
    blob = bucket.blob(name)
    blob.upload_from_string(data)
    return ObjectEvent(
        kind="finalize", bucket=bucket.name, name=name, generation=str(blob.generation), event_id=uuid.uuid4().hex
    )


def test_a_marker_that_lands_first_gives_a_run_that_trains_only_what_its_version_recorded(
    storage_client: Any, clean_firestore: Emulator, requests_topic: tuple[str, Any]
) -> None:
    from google.cloud import firestore, pubsub_v1

    bucket = storage_client.create_bucket(f"snapshot-it-{uuid.uuid4().hex[:8]}")
    bucket.versioning_enabled = True  # keeps the generation the version recorded after its object is rewritten
    bucket.patch()
    topic, subscriber = requests_topic
    drain(subscriber)
    publisher = pubsub_v1.PublisherClient()
    db = firestore.Client(project=PROJECT)
    deps = IngestDeps(
        settings=replace(settings_from_env({"GOOGLE_CLOUD_PROJECT": PROJECT}), allowed_buckets=(bucket.name,)),
        objects=GcsObjects(storage_client),
        datasets=DatasetsStore(db, "datasets", "dataset_versions"),
        publish=lambda data: str(publisher.publish(topic, data).result(timeout=30)),
        now=Clock(T0),
        routes=lambda: (ROUTE,),
    )
    folder = "datasets/parallel/"

    # The marker lands first: the version waits for data instead of being refused.
    outcome = handle_object_event(upload(bucket, folder + "_SUCCESS", b""), deps)
    assert outcome.startswith("waiting:"), outcome
    assert drain(subscriber) == []
    # The small object lands (a shard's event is acknowledged unread): the sweep's tick cuts the version.
    small = datagen.csv_text(datagen.separable_rows(120, 0)).encode()
    small_event = upload(bucket, folder + "part-0.csv", small)
    assert handle_object_event(small_event, deps) == "data"
    assert handle_sweep(PubSubMessage(data=b"{}", message_id="tick-1"), deps) == "swept: published=1"
    # A large object lands after the cut, and the small one is rewritten: neither is in this version.
    large = datagen.csv_text(datagen.separable_rows(900, 1)).encode()
    assert handle_object_event(upload(bucket, folder + "part-1.csv", large), deps) == "data"
    rewritten = upload(bucket, folder + "part-0.csv", datagen.csv_text(datagen.separable_rows(40, 2)).encode())
    assert rewritten.generation != small_event.generation

    (request,) = drain(subscriber)  # through the requests topic and its schema
    recorded = (DataObject("part-0.csv", small_event.generation, len(small)),)
    assert request.dataset.objects == recorded
    assert (request.dataset.object_count, request.dataset.total_bytes) == (1, len(small))
    assert request.dataset.objects_digest == objects_digest(recorded)
    assert [parse_dataset_record(d.to_dict() or {}).status for d in db.collection("datasets").stream()] == [
        DatasetStatus.REQUESTED
    ]

    # The job's trainer arguments, exactly as the dispatcher writes them, run the trainer on fake-gcs-server.
    from functions.dispatch.job_spec import trainer_args

    model_dir = f"gs://{bucket.name}/runs/{request.run_id}/model/"
    args = trainer_args(request, replace(PLAN, global_batch_size=16, micro_batch_size=16))
    run = run_trainer(args, trainer_env(AIP_MODEL_DIR=model_dir))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    metrics = json.loads(bucket.blob(f"runs/{request.run_id}/model/metrics.json").download_as_bytes())
    evaluation = metrics["evaluation"]
    assert evaluation["train_samples"] + evaluation["samples"] == 120  # the recorded generation's rows only
    read = [{"name": "part-0.csv", "generation": small_event.generation, "size": len(small)}]
    assert metrics["data"]["objects"] == read
    assert metrics["data"]["source"] == "request"

    # The listener records the run's success with what the trainer read, typed, in Firestore.
    runs = RunsStore(db, "runs")
    job_name = f"projects/{PROJECT}/locations/us-central1/customJobs/1"
    stored = replace(
        new_run(request.run_id, request.to_dict(), now=T0, state=RunState.RUNNING),
        vertex=VertexJobRef(job_name=job_name, job_id="1", region="us-central1"),
        artifacts=Artifacts(
            output_dir=model_dir.removesuffix("model/"), model_dir=model_dir, checkpoint_dir="", tensorboard_dir=""
        ),
    )
    runs.create_if_absent(stored)
    ended = format_timestamp(T0 + timedelta(minutes=5))
    job = JobView(
        name=job_name,
        job_id="1",
        region="us-central1",
        display_name="",
        state="JOB_STATE_SUCCEEDED",
        error_code=0,
        error_message="",
        create_time=format_timestamp(T0),
        start_time=format_timestamp(T0),
        end_time=ended,
        labels={},
    )
    job_deps = JobStateDeps(
        store=runs,
        vertex=VertexJobs(PROJECT, lambda region: None),  # not called: the job is given
        read_text=read_gcs_text(storage_client),
        now=Clock(T0),
    )
    assert record_job_state(stored, job, job_deps) == "recorded:SUCCEEDED"
    record = parse_run_record(db.document(f"runs/{request.run_id}").get().to_dict())
    assert record.state == RunState.SUCCEEDED
    assert record.data_read is not None
    assert (record.data_read.object_count, record.data_read.total_bytes) == (1, len(small))
    assert record.data_read.objects == recorded
    assert record.data_read.objects_digest == request.dataset.objects_digest


def test_an_object_rewritten_after_the_cut_in_a_bucket_without_versioning_fails_the_run_naming_it(
    storage_client: Any, tmp_path: Path
) -> None:
    """Without object versioning the recorded generation is gone once rewritten: the trainer refuses to train on
    bytes its version did not record, naming the object and what to do."""
    bucket = storage_client.create_bucket(f"snapshot-it-{uuid.uuid4().hex[:8]}")
    blob = bucket.blob("datasets/d/part-0.csv")
    blob.upload_from_string(datagen.csv_text(datagen.separable_rows(60, 0)))
    recorded = DataObject("part-0.csv", str(blob.generation), int(blob.size))
    bucket.blob("datasets/d/part-0.csv").upload_from_string(datagen.csv_text(datagen.separable_rows(30, 1)))
    request = parse_training_request(
        {
            "dataset": {
                "uri": f"gs://{bucket.name}/datasets/d/",
                "objects": [{"name": recorded.name, "generation": recorded.generation, "size": recorded.size}],
                "objects_digest": objects_digest([recorded]),
            },
            "task": "tabular-classification",
            "model": {"preset": "mlp-small"},
            "hyperparameters": {"epochs": 1, "batch_size": 16},
        }
    )
    from functions.dispatch.job_spec import trainer_args

    args = trainer_args(request, replace(PLAN, global_batch_size=16, micro_batch_size=16))
    run = run_trainer(args, trainer_env(AIP_MODEL_DIR=str(tmp_path / "model")))
    assert run.returncode == 3, run.stdout[-3000:] + run.stderr[-3000:]
    # the trainer's own error (the launcher adds one saying it stopped the node's other processes)
    (error,) = [r for r in run.records() if r.get("severity") == "ERROR" and r.get("error")]
    assert f"part-0.csv#{recorded.generation}: this generation no longer exists" in error["message"]
