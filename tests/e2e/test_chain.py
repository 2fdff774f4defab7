"""End to end through the real emulators, the way a user does it: drop data, publish messages, read Firestore."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from deploy.local import stack
from landfall.commands.demo import upload_dataset
from landfall.synthetic import separable_csv_shards
from schemas.run_record import TERMINAL_STATES, RunState
from schemas.training_request import parse_training_request, run_id_for
from tests.polling import wait_for

pytestmark = pytest.mark.e2e
EXAMPLES = Path(__file__).resolve().parents[2] / "schemas" / "examples"


def terminal_run(runs: Any, run_id: str, timeout_s: float = 240) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        snap = runs.document(run_id).get()
        doc = snap.to_dict() if snap.exists else None
        return doc if doc and RunState(doc["state"]) in TERMINAL_STATES else None

    return wait_for(done, timeout_s, f"run {run_id} to end")


def test_dropped_dataset_ends_as_succeeded_run_with_metrics(
    local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any
) -> None:
    prefix = "datasets/e2e-separable/"
    generation = upload_dataset(landing_bucket.name, prefix, separable_csv_shards(shards=3, rows_per_shard=200))
    run_id = run_id_for(f"gcs:{landing_bucket.name}/{prefix}:{generation}")
    doc = terminal_run(firestore_runs, run_id)
    assert doc["state"] == "SUCCEEDED", doc.get("error")
    assert [h["state"] for h in doc["history"]] == [
        "RECEIVED",
        "PLANNED",
        "SUBMITTING",
        "SUBMITTED",
        "RUNNING",
        "SUCCEEDED",
    ] or doc["history"][-1]["state"] == "SUCCEEDED"
    assert doc["request"]["dataset"] == {
        "uri": f"gs://{landing_bucket.name}/{prefix}",
        "object_count": 3,
        "total_bytes": doc["request"]["dataset"]["total_bytes"],
        "formats": ["csv"],
    }
    assert doc["plan"]["machine_type"]
    assert doc["vertex"]["job_name"].startswith(f"projects/{local_stack.env['GOOGLE_CLOUD_PROJECT']}/locations/")
    assert doc["vertex"]["state"] == "JOB_STATE_SUCCEEDED"
    assert doc["timings"]["started_at"] <= doc["timings"]["ended_at"]
    final = doc["metrics"]["final"]
    assert final["accuracy"] >= 0.9
    assert final["loss"] < 0.5
    # The same marker notification again (a redelivery) makes no second run or job.
    from google.cloud import pubsub_v1

    from functions.dispatch.job_spec import RUN_LABEL
    from functions.wiring import vertex_jobs

    assert vertex_jobs().find_by_run(doc["vertex"]["region"], run_id) is not None
    attrs = {
        "eventType": "OBJECT_FINALIZE",
        "bucketId": landing_bucket.name,
        "objectId": f"{prefix}_SUCCESS",
        "objectGeneration": str(generation),
        "payloadFormat": "JSON_API_V1",
    }
    publisher = pubsub_v1.PublisherClient()
    topic = f"projects/{local_stack.env['GOOGLE_CLOUD_PROJECT']}/topics/landfall-object-events"
    publisher.publish(
        topic, json.dumps({"bucket": landing_bucket.name, "name": f"{prefix}_SUCCESS"}).encode(), **attrs
    ).result(timeout=30)
    # Ingest's version outbox stops it there: no second request reaches the dispatcher.
    log = local_stack.state_dir / "logs" / "on_object_finalized.log"
    duplicate = f"gs://{landing_bucket.name}/{prefix} version {generation} already PUBLISHED"
    wait_for(lambda: log.read_text().count(duplicate) >= 1, 30, "the duplicate to be seen")
    client = vertex_jobs()._client(doc["vertex"]["region"])
    jobs = list(
        client.list_custom_jobs(
            request={
                "parent": doc["vertex"]["job_name"].rsplit("/customJobs", 1)[0],
                "filter": f'labels.{RUN_LABEL}="{run_id}"',
            }
        )
    )
    assert len(jobs) == 1


def _publish(local_stack: stack.StackInfo, topic: str, data: bytes, **attrs: str) -> str:
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    path = f"projects/{local_stack.env['GOOGLE_CLOUD_PROJECT']}/topics/{topic}"
    # mypy matches **attrs against publish's retry= and timeout= as well, though no key here is either
    return str(publisher.publish(path, data, **attrs).result(timeout=30))  # type: ignore[arg-type]


def test_semantically_invalid_request_becomes_rejected_run(local_stack: stack.StackInfo, firestore_runs: Any) -> None:
    data = json.loads((EXAMPLES / "training_request.json").read_text())
    data["idempotency_key"] = "e2e-bad-preset"
    data["model"]["preset"] = "mlp-enormous"
    data["dataset"]["uri"] = "gs://landfall-landing/datasets/churn/2026-11-22/"
    _publish(local_stack, "landfall-training-requests", json.dumps(data).encode())
    doc = terminal_run(firestore_runs, parse_training_request(data).run_id, 60)
    assert doc["state"] == "REJECTED"
    assert "unknown model preset 'mlp-enormous'" in doc["error"]["message"]


def test_malformed_request_is_refused_by_the_topic_schema_or_else_rejected_naming_the_field(
    local_stack: stack.StackInfo, firestore_runs: Any
) -> None:
    """With the Protocol Buffer schema attached (Google Cloud) the topic refuses the message at publish time. The
    Pub/Sub emulator takes no such schema (501; deploy/local/provision.py), so on the local stack the message is
    delivered and the dispatcher records a REJECTED run that names the field (tests/unit/test_schemas.py holds the
    schema's own refusal)."""
    from google.api_core.exceptions import InvalidArgument
    from google.cloud import pubsub_v1

    topic = f"projects/{local_stack.env['GOOGLE_CLOUD_PROJECT']}/topics/landfall-training-requests"
    malformed = json.dumps(
        {
            "idempotency_key": 1,
            "dataset": {"uri": "gs://landfall-landing/datasets/churn/"},
            "task": "tabular-classification",
            "model": {"preset": "mlp-small"},
        }
    ).encode()
    if pubsub_v1.PublisherClient().get_topic(topic=topic).schema_settings.schema:
        with pytest.raises(InvalidArgument):
            _publish(local_stack, "landfall-training-requests", malformed)
        return
    message_id = _publish(local_stack, "landfall-training-requests", malformed)
    doc = terminal_run(firestore_runs, run_id_for(f"pubsub-message:{message_id}"), 60)
    assert doc["state"] == "REJECTED" and doc["error"]["code"] == "invalid-request"
    assert "idempotency_key" in doc["error"]["message"], doc["error"]


def test_bad_input_at_each_entry_point_is_acknowledged_once(local_stack: stack.StackInfo) -> None:
    logs = local_stack.state_dir / "logs"
    _publish(
        local_stack, "landfall-object-events", b"\x00garbage", eventType="OBJECT_FINALIZE", bucketId="b", objectId="o"
    )
    _publish(local_stack, "landfall-job-events", b"not a log entry")
    _publish(local_stack, "landfall-job-events", json.dumps({"resource": {"type": "gce_instance"}}).encode())

    def seen() -> bool:
        ingest = (logs / "on_object_finalized.log").read_text()
        listener = (logs / "on_job_event.log").read_text()
        return "notification payload is not JSON" in ingest and listener.count("acknowledged") >= 2

    wait_for(seen, 30, "each bad message to be acknowledged")
    before = (logs / "on_object_finalized.log").read_text().count("notification payload is not JSON")
    # Acknowledged means not redelivered: after the push retry interval the count has not grown.
    wait_for(lambda: all(s.pid and stack.processes.is_alive(s.pid) for s in local_stack.services), 3, "servers up")
    import time

    time.sleep(3)  # longer than the subscriptions' minimum retry backoff (1 s): a nacked message would be back
    assert (logs / "on_object_finalized.log").read_text().count("notification payload is not JSON") == before == 1
