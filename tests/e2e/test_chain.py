"""End to end through the real emulators, the way a user does it: drop data, publish messages, read Firestore."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest

from deploy.images import trainer_entrypoint, trainer_image
from deploy.local import stack
from landfall.cli import build_parser
from landfall.synthetic import separable_csv_shards
from schemas.run_record import TERMINAL_STATES, RunState, parse_run_record
from schemas.training_request import run_id_for
from tests.e2e.conftest import acknowledged_once
from tests.polling import wait_for

pytestmark = pytest.mark.e2e
EXAMPLES = Path(__file__).resolve().parents[2] / "schemas" / "examples"


def terminal_run(runs: Any, run_id: str, timeout_s: float = 240) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        snap = runs.document(run_id).get()
        doc = snap.to_dict() if snap.exists else None
        return doc if doc and RunState(doc["state"]) in TERMINAL_STATES else None

    return wait_for(done, timeout_s, f"run {run_id} to end")


def landfall(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """A `landfall` command, run in this process as a user's shell would (the stack's variables are set)."""
    args: argparse.Namespace = build_parser().parse_args(list(argv))
    code = args.func(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_dropped_dataset_ends_as_succeeded_run_with_metrics(
    local_stack: stack.StackInfo,
    firestore_runs: Any,
    landing_bucket: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The whole chain once, as a user drives it: `landfall drop` lands a folder (files, then the marker), the real
    notification reaches ingest, the dispatcher plans and submits, the Vertex emulator runs the deployed trainer
    image, the listener records SUCCEEDED with metrics, `landfall watch` follows it; then the marker's notification
    again and the same files again make no second run."""
    from functions.settings import get_settings
    from functions.wiring import vertex_jobs

    prefix = "datasets/e2e-separable/"
    folder = tmp_path / "separable"
    (folder / "part").mkdir(parents=True)
    for i, text in enumerate(separable_csv_shards(shards=3, rows_per_shard=200)):
        (folder / "part" / f"shard-{i}.csv").write_text(text)
    uri = f"gs://{landing_bucket.name}/{prefix}"

    code, out, err = landfall(capsys, "drop", str(folder), uri)
    assert code == 0, err
    assert "upload" in err and "100%" in err  # the progress bar, on stderr
    assert re.search(r"status\s+REQUESTED", out), out
    run_id = re.search(r"^run\s+(run-[0-9a-f]{20})", out, re.M).group(1)  # type: ignore[union-attr]
    assert sorted(b.name for b in landing_bucket.list_blobs(prefix=prefix)) == [
        f"{prefix}_SUCCESS",
        f"{prefix}part/shard-0.csv",
        f"{prefix}part/shard-1.csv",
        f"{prefix}part/shard-2.csv",
    ]
    generation = landing_bucket.get_blob(f"{prefix}_SUCCESS").generation
    assert run_id == run_id_for(f"gcs:{landing_bucket.name}/{prefix}:{generation}")

    code, out, err = landfall(capsys, "watch", run_id)
    doc = terminal_run(firestore_runs, run_id)
    assert code == 0 and doc["state"] == "SUCCEEDED", (out, err, doc.get("error"))
    lines = out.splitlines()
    printed = [line.split()[1] for line in lines if not line.startswith((" ", "run "))]
    assert printed == [h.state for h in parse_run_record(doc).history]
    assert lines[-1].startswith(f"run {run_id} ended SUCCEEDED: ") and "accuracy" in lines[-1]
    assert lines[-1].endswith("(on the held-out split)")
    # progress, where a poll caught the trainer: losses labelled (training or held-out), steps of the planned total
    progress = [line.strip() for line in lines if line.startswith(" ")]
    assert all(
        re.search(r"(train|held-out) loss", line) for line in progress if "loss" in line and "trainer:" not in line
    )
    assert all(re.search(r"step \d+/\d+ \(\d+%\)", line) for line in progress if "train loss" in line), progress

    assert [h["state"] for h in doc["history"]] == [
        "RECEIVED",
        "PLANNED",
        "SUBMITTING",
        "SUBMITTED",
        "RUNNING",
        "SUCCEEDED",
    ] or doc["history"][-1]["state"] == "SUCCEEDED"
    shards = sorted(landing_bucket.list_blobs(prefix=f"{prefix}part/"), key=lambda b: b.name)
    recorded = [{"name": b.name.removeprefix(prefix), "generation": str(b.generation), "size": b.size} for b in shards]
    assert doc["request"]["dataset"] == {
        "uri": uri,
        "object_count": 3,
        "total_bytes": sum(b.size for b in shards),
        "formats": ["csv"],
        "objects": recorded,  # the version is a snapshot: the objects and generations it measured
        "objects_digest": doc["request"]["dataset"]["objects_digest"],
    }
    assert doc["data_read"]["objects"] == recorded
    assert doc["plan"]["machine_type"]
    assert doc["vertex"]["job_name"].startswith(f"projects/{local_stack.env['GOOGLE_CLOUD_PROJECT']}/locations/")
    assert doc["vertex"]["state"] == "JOB_STATE_SUCCEEDED"
    assert doc["timings"]["started_at"] <= doc["timings"]["ended_at"]
    final = doc["metrics"]["final"]
    assert final["accuracy"] >= 0.9
    assert final["loss"] < 0.5

    # The job ran the trainer the way Google Cloud will: the CustomJob names the trainer image through
    # container_spec (the URI `landfall deploy` builds, with the local tag) and the Vertex emulator ran that image's
    # ENTRYPOINT from trainer/Dockerfile.
    job = vertex_jobs()._client(doc["vertex"]["region"]).get_custom_job(name=doc["vertex"]["job_name"])
    expected = get_settings().trainer_image  # what the functions were started with: the local stack sets none
    assert expected == trainer_image().uri(local_stack.env["GOOGLE_CLOUD_PROJECT"], get_settings().default_region)
    for pool in job.job_spec.worker_pool_specs:
        if pool.replica_count:
            assert pool.container_spec.image_uri == expected
            assert not pool.container_spec.command, "the image's ENTRYPOINT runs, as in a real container"
            assert not pool.python_package_spec.python_module
    assert trainer_entrypoint() == ("python", "-m", "trainer.launcher")

    # The same marker notification again (a redelivery) makes no second run or job.
    from google.cloud import pubsub_v1

    from functions.dispatch.job_spec import RUN_LABEL

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
    duplicate = f"{uri} version {generation} already PUBLISHED"
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

    # --quiet: no bar; the same files again are a duplicate of that run, which drop prints.
    code, out, err = landfall(capsys, "drop", str(folder), uri, "--quiet")
    assert err == "" and re.search(r"status\s+DUPLICATE", out) and run_id in out


def _publish(local_stack: stack.StackInfo, topic: str, data: bytes, **attrs: str) -> str:
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    path = f"projects/{local_stack.env['GOOGLE_CLOUD_PROJECT']}/topics/{topic}"
    # mypy matches **attrs against publish's retry= and timeout= as well, though no key here is either
    return str(publisher.publish(path, data, **attrs).result(timeout=30))  # type: ignore[arg-type]


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
    garbage = _publish(
        local_stack, "landfall-object-events", b"\x00garbage", eventType="OBJECT_FINALIZE", bucketId="b", objectId="o"
    )
    not_a_log_entry = _publish(local_stack, "landfall-job-events", b"not a log entry")
    not_a_job = _publish(
        local_stack, "landfall-job-events", json.dumps({"resource": {"type": "gce_instance"}}).encode()
    )
    # Acknowledged means settled at the first delivery: the bridge's record of each message is one acknowledged
    # attempt, so none comes back (no back-off to wait out).
    acknowledged_once(local_stack, "on_object_finalized", garbage)
    acknowledged_once(local_stack, "on_job_event", not_a_log_entry)
    acknowledged_once(local_stack, "on_job_event", not_a_job)
    assert (logs / "on_object_finalized.log").read_text().count("notification payload is not JSON") == 1
    assert (logs / "on_job_event.log").read_text().count("acknowledged") >= 2
