"""Ingest end to end, the way users and Cloud Storage drive it: objects uploaded through google-cloud-storage make
fake-gcs-server publish real notifications, which reach the ingest function by push subscription; requests are
read back from the requests topic through a pull subscription; dataset status from Firestore."""

from __future__ import annotations

import json
import urllib.request
import uuid
from typing import Any

import pytest

from deploy.local import stack
from schemas.dataset_record import DatasetStatus, dataset_id_for
from schemas.training_request import TrainingRequest, parse_training_request
from tests.e2e.conftest import EXTRA_BUCKET, acknowledged_once
from tests.polling import wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:The return_immediately flag is deprecated:DeprecationWarning"),
]
SHARD = b"x0,x1,label\n0.1,0.2,0\n0.9,0.8,1\n"


class RequestTap:
    """A pull subscription on the requests topic: every TrainingRequest published, by dataset URI."""

    def __init__(self, project: str) -> None:
        from google.cloud import pubsub_v1

        self.subscriber = pubsub_v1.SubscriberClient()
        self.path = f"projects/{project}/subscriptions/e2e-request-tap"
        self.subscriber.create_subscription(
            name=self.path, topic=f"projects/{project}/topics/landfall-training-requests"
        )
        self.seen: list[TrainingRequest] = []

    def collect(self) -> None:
        while True:
            response = self.subscriber.pull(
                subscription=self.path, max_messages=100, return_immediately=True, timeout=10
            )
            if not response.received_messages:
                return
            self.subscriber.acknowledge(subscription=self.path, ack_ids=[m.ack_id for m in response.received_messages])
            self.seen += [parse_training_request(m.message.data) for m in response.received_messages]

    def for_uri(self, uri: str) -> list[TrainingRequest]:
        self.collect()
        return [r for r in self.seen if r.dataset.uri == uri]

    def wait_for_one(self, uri: str, timeout_s: float = 60) -> TrainingRequest:
        (request,) = wait_for(lambda: self.for_uri(uri), timeout_s, f"a TrainingRequest for {uri}")
        return request


@pytest.fixture(scope="module")
def tap(local_stack: stack.StackInfo) -> RequestTap:
    return RequestTap(local_stack.env["GOOGLE_CLOUD_PROJECT"])


@pytest.fixture(scope="module")
def datasets(local_stack: stack.StackInfo) -> Any:
    from google.cloud import firestore

    return firestore.Client(project=local_stack.env["GOOGLE_CLOUD_PROJECT"]).collection("datasets")


def dataset(datasets: Any, bucket: str, prefix: str) -> dict[str, Any] | None:
    snapshot = datasets.document(dataset_id_for(bucket, prefix)).get()
    return snapshot.to_dict() if snapshot.exists else None


def dataset_in(datasets: Any, bucket: str, prefix: str, status: DatasetStatus, timeout_s: float = 30) -> dict:
    def check() -> dict[str, Any] | None:
        doc = dataset(datasets, bucket, prefix)
        return doc if doc and doc["status"] == status else None

    return wait_for(check, timeout_s, f"gs://{bucket}/{prefix} to be {status}")


def log_text(local_stack: stack.StackInfo, service: str) -> str:
    return (local_stack.state_dir / "logs" / f"{service}.log").read_text()


def publish(local_stack: stack.StackInfo, topic: str, data: bytes, **attrs: str) -> Any:
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    # mypy matches **attrs against publish's retry= and timeout= as well, though no key here is either
    return publisher.publish(f"projects/{local_stack.env['GOOGLE_CLOUD_PROJECT']}/topics/{topic}", data, **attrs)  # type: ignore[arg-type]


def sweep_passes(local_stack: stack.StackInfo) -> int:
    """Sweep ticks the sweep function has answered: each logs one `sweep_datasets: swept: ...` line."""
    return log_text(local_stack, "sweep_datasets").count("sweep_datasets: swept:")


def test_quiet_period_dataset_becomes_one_request_through_the_sweep(
    local_stack: stack.StackInfo, landing_bucket: Any, tap: RequestTap, datasets: Any
) -> None:
    prefix = "quiet/exports-1/"
    for i in range(3):
        landing_bucket.blob(f"{prefix}part-{i}.csv").upload_from_string(SHARD)
    dataset_in(datasets, landing_bucket.name, prefix, DatasetStatus.COLLECTING)
    uri = f"gs://{landing_bucket.name}/{prefix}"
    request = tap.wait_for_one(uri, 60)
    newest = max(landing_bucket.list_blobs(prefix=prefix), key=lambda b: b.generation)
    assert request.idempotency_key == f"gcs:{landing_bucket.name}/{prefix}:{newest.generation}"
    assert (request.source.kind, request.dataset.object_count) == ("quiet-period", 3)
    # Three more sweep passes, each answered (the scheduler ticks every second here): still one request.
    passes = sweep_passes(local_stack)
    wait_for(lambda: sweep_passes(local_stack) >= passes + 3, 30, "three more sweep passes")
    assert len(tap.for_uri(uri)) == 1
    assert dataset(datasets, landing_bucket.name, prefix)["status"] == DatasetStatus.REQUESTED  # type: ignore[index]


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("ingest-only/a/../b/_SUCCESS", "'..' path segment"),
        ("ingest-only/a\x1bb/_SUCCESS", "control character"),
        ("ingest-only/" + "x" * 1100 + "/_SUCCESS", "Cloud Storage allows at most 1024"),
        ("elsewhere/data/_SUCCESS", "no route in deploy/routes.toml covers it"),
    ],
)
def test_hostile_object_names_are_acknowledged_once_with_a_reason(
    local_stack: stack.StackInfo, landing_bucket: Any, tap: RequestTap, name: str, reason: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    top, rest = name.split("/", 1)
    name = f"{top}/{tag}-{rest}"  # logs show the first 200 characters of a name
    attrs = {
        "eventType": "OBJECT_FINALIZE",
        "bucketId": landing_bucket.name,
        "objectId": name,
        "objectGeneration": "1",
        "payloadFormat": "JSON_API_V1",
    }
    message_id = publish(local_stack, "landfall-object-events", b"", **attrs).result(timeout=30)
    # Settled at the first delivery (the bridge's record: one attempt, acknowledged): it does not come back.
    acknowledged_once(local_stack, "on_object_finalized", message_id)
    log = log_text(local_stack, "on_object_finalized").splitlines()
    assert sum(reason in line and tag in line for line in log) == 1, f"the ingest function to log {reason!r} once"
    assert not [r for r in tap.for_uri("") if tag in r.dataset.uri]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (
            b"{" + b'"objects": [' + b'{"name": "part-0.csv", "size": 1}, ' * 90_000 + b"]}",
            "_MANIFEST.json is larger than 1048576 bytes",
        ),
        (b"objects: part-0.csv", "_MANIFEST.json is not JSON"),
    ],
    ids=["multi-megabyte", "not-json"],
)
def test_unusable_manifest_is_refused_with_a_reason(
    landing_bucket: Any, tap: RequestTap, datasets: Any, content: bytes, reason: str
) -> None:
    prefix = f"ingest-only/bad-manifest-{uuid.uuid4().hex[:8]}/"
    landing_bucket.blob(f"{prefix}part-0.csv").upload_from_string(SHARD)
    landing_bucket.blob(f"{prefix}_MANIFEST.json").upload_from_string(content)
    doc = dataset_in(datasets, landing_bucket.name, prefix, DatasetStatus.REFUSED)
    assert reason in doc["reason"]
    assert tap.for_uri(f"gs://{landing_bucket.name}/{prefix}") == []


def test_refused_landfall_json_field_is_named(landing_bucket: Any, tap: RequestTap, datasets: Any) -> None:
    prefix = "ingest-only/overrides/"
    landing_bucket.blob(f"{prefix}part-0.csv").upload_from_string(SHARD)
    landing_bucket.blob(f"{prefix}landfall.json").upload_from_string(
        json.dumps({"hyperparameters": {"epochs": 2}, "model": {"preset": "gpt-7b"}})
    )
    landing_bucket.blob(f"{prefix}_SUCCESS").upload_from_string(b"")
    doc = dataset_in(datasets, landing_bucket.name, prefix, DatasetStatus.REFUSED)
    assert "model.preset (route 'ingest-only' does not allow it; allowed: hyperparameters.*)" in doc["reason"]
    assert tap.for_uri(f"gs://{landing_bucket.name}/{prefix}") == []


def test_storage_cloudevents_are_read_like_notifications(local_stack: stack.StackInfo, tap: RequestTap) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(project=local_stack.env["GOOGLE_CLOUD_PROJECT"], credentials=AnonymousCredentials())
    bucket = client.lookup_bucket(EXTRA_BUCKET) or client.create_bucket(EXTRA_BUCKET)
    prefix = "ingest-only/cloudevent/"
    bucket.blob(f"{prefix}part-0.csv").upload_from_string(SHARD)
    marker = bucket.blob(f"{prefix}_SUCCESS")
    marker.upload_from_string(b"")
    port = next(s.port for s in local_stack.services if s.name == "on_object_finalized")

    def post(kind: str) -> None:
        resource = {
            "bucket": EXTRA_BUCKET,
            "name": f"{prefix}_SUCCESS",
            "generation": str(marker.generation),
            "size": "0",
        }
        headers = {
            "Content-Type": "application/json",
            "ce-specversion": "1.0",
            "ce-id": uuid.uuid4().hex,
            "ce-type": f"google.cloud.storage.object.v1.{kind}",
            "ce-source": f"//storage.googleapis.com/projects/_/buckets/{EXTRA_BUCKET}",
            "ce-subject": f"objects/{prefix}_SUCCESS",
            "ce-time": "2026-11-22T12:00:00Z",
        }
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/", data=json.dumps(resource).encode(), headers=headers, method="POST"
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200

    post("deleted")
    post("metadataUpdated")
    assert tap.for_uri(f"gs://{EXTRA_BUCKET}/{prefix}") == []
    post("finalized")
    request = tap.wait_for_one(f"gs://{EXTRA_BUCKET}/{prefix}")
    assert request.idempotency_key == f"gcs:{EXTRA_BUCKET}/{prefix}:{marker.generation}"
    ingest_log = log_text(local_stack, "on_object_finalized")
    assert "on_object_finalized: ignored:delete" in ingest_log
    assert "on_object_finalized: ignored:metadata" in ingest_log


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            {"constraints": {"deadline": "2020-01-01T00:00:00Z"}},
            "constraints.deadline: 2020-01-01T00:00:00Z is already past",
        ),
        (
            {"dataset": {"uri": "gs://someone-elses-bucket/data/"}},
            "bucket 'someone-elses-bucket' is not one Landfall reads from",
        ),
    ],
    ids=["deadline-past", "bucket-not-allowed"],
)
def test_direct_request_breaking_a_semantic_rule_is_a_rejected_run(
    local_stack: stack.StackInfo, firestore_runs: Any, change: dict, reason: str
) -> None:
    from pathlib import Path

    data = json.loads((Path(__file__).resolve().parents[2] / "schemas/examples/training_request.json").read_text())
    data["idempotency_key"] = f"e2e-direct-{uuid.uuid4().hex}"
    for section, values in change.items():
        data[section].update(values)
    publish(local_stack, "landfall-training-requests", json.dumps(data).encode()).result(timeout=30)
    run_id = parse_training_request(data).run_id

    def rejected() -> dict[str, Any] | None:
        snapshot = firestore_runs.document(run_id).get()
        doc = snapshot.to_dict() if snapshot.exists else None
        return doc if doc and doc["state"] == "REJECTED" else None

    doc = wait_for(rejected, 60, f"run {run_id} to be REJECTED")
    assert reason in doc["error"]["message"]
