"""Pure logic of the functions: envelopes, transitions and the submission claim, request rules, job spec."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cloudevents.http import CloudEvent

from functions import envelopes
from functions.dispatch.job_spec import RUN_LABEL, custom_job
from functions.dispatch.request_rules import request_problems
from functions.errors import PermanentError
from functions.records.leases import ClaimOutcome
from functions.records.run_rules import claimed, transitioned
from functions.settings import settings_from_env
from schemas import parse_training_request
from schemas.plan import parse_plan
from schemas.run_record import RunRecord, RunState, new_run

EXAMPLES = Path(__file__).resolve().parents[2] / "schemas" / "examples"
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SETTINGS = settings_from_env({"GOOGLE_CLOUD_PROJECT": "landfall-local"})


def pubsub_event(data: bytes, attributes: dict[str, str] | None = None, message_id: str = "7") -> CloudEvent:
    return CloudEvent(
        {"type": envelopes.PUBSUB_PUBLISHED, "source": "//pubsub.googleapis.com/projects/p/topics/t", "id": message_id},
        {
            "message": {
                "data": base64.b64encode(data).decode(),
                "attributes": attributes or {},
                "messageId": message_id,
                "publishTime": "2026-11-22T12:00:00Z",
            }
        },
    )


def test_notification_and_cloudevent_decode_to_the_same_object_event() -> None:
    golden = json.loads((EXAMPLES / "gcs_notification.json").read_text())
    from_notification = envelopes.object_event(pubsub_event(json.dumps(golden["data"]).encode(), golden["attributes"]))
    ce = json.loads((EXAMPLES / "storage_cloudevent.json").read_text())
    from_cloudevent = envelopes.object_event(CloudEvent(ce["attributes"], ce["data"]))
    for event in (from_notification, from_cloudevent):
        assert (event.kind, event.bucket, event.name, event.generation) == (
            "finalize",
            "landfall-landing",
            "datasets/churn/2026-11-22/_SUCCESS",
            "1763800000000000",
        )


@pytest.mark.parametrize(
    ("data", "attributes", "match"),
    [
        (b"{}", {}, "eventType"),
        (b"not json", {"eventType": "OBJECT_FINALIZE", "bucketId": "b", "objectId": "o"}, "not JSON"),
        (b"", {"eventType": "OBJECT_FINALIZE"}, "bucket or object name"),
    ],
)
def test_bad_notifications_are_permanent_errors(data: bytes, attributes: dict[str, str], match: str) -> None:
    with pytest.raises(PermanentError, match=match):
        envelopes.object_event(pubsub_event(data, attributes))


def test_unknown_event_type_is_permanent() -> None:
    event = CloudEvent({"type": "com.example.unknown", "source": "x", "id": "1"}, {})
    with pytest.raises(PermanentError, match="unexpected event type"):
        envelopes.pubsub_message(event)


def base_run(state: str = "RECEIVED") -> RunRecord:
    return new_run("run-x", {}, now=NOW, state=RunState(state))


PLAN = parse_plan(json.loads((EXAMPLES / "plan_cpu.json").read_text()))


def test_transition_forward_records_history_and_backward_is_refused() -> None:
    doc = transitioned(base_run(), RunState.PLANNED, now=NOW, detail="p", change=lambda r: replace(r, plan=PLAN))
    assert doc is not None and doc.state == "PLANNED" and doc.plan == PLAN
    assert [h.state for h in doc.history] == ["RECEIVED", "PLANNED"]
    assert transitioned(doc, RunState.RECEIVED, now=NOW) is None
    assert transitioned(base_run("SUCCEEDED"), RunState.RUNNING, now=NOW) is None
    same = transitioned(doc, RunState.PLANNED, now=NOW, change=lambda r: replace(r, metrics={"x": 2}))
    assert same is not None and len(same.history) == 2 and same.metrics == {"x": 2}


def test_claim_is_exclusive_until_the_lease_runs_out() -> None:
    first = claimed(base_run("PLANNED"), owner="a", now=NOW, lease_seconds=60)
    assert first.outcome == ClaimOutcome.CLAIMED and first.doc.state == "SUBMITTING"
    assert claimed(first.doc, owner="b", now=NOW + timedelta(seconds=30), lease_seconds=60).outcome == ClaimOutcome.BUSY
    later = claimed(first.doc, owner="b", now=NOW + timedelta(seconds=61), lease_seconds=60)
    assert later.outcome == ClaimOutcome.RECOVER and later.doc.submission.owner == "b"
    assert claimed(base_run("SUBMITTED"), owner="c", now=NOW, lease_seconds=60).outcome == ClaimOutcome.DONE


def golden_request():
    return parse_training_request((EXAMPLES / "training_request.json").read_bytes())


def test_request_rules_name_each_problem() -> None:
    request = golden_request()
    assert request_problems(request, SETTINGS, NOW) == []
    bad = replace(
        request,
        model=replace(request.model, preset="gpt-tiny"),
        dataset=replace(request.dataset, uri="gs://elsewhere/data/"),
        constraints=replace(request.constraints, deadline="2026-11-21T00:00:00Z"),
    )
    problems = " | ".join(request_problems(bad, SETTINGS, NOW))
    assert "gpt preset but task 'tabular-classification' needs a mlp preset" in problems
    assert "bucket 'elsewhere' is not one Landfall reads from" in problems
    assert "already past" in problems
    unknown = replace(request, model=replace(request.model, preset="gpt-9000"))
    assert "known presets" in request_problems(unknown, SETTINGS, NOW)[0]


def golden_plan(**changes):
    return replace(parse_plan(json.loads((EXAMPLES / "plan_cpu.json").read_text())), **changes)


def test_custom_job_pools_for_multi_node_spot_plan_with_reduction_server() -> None:
    plan = golden_plan(
        machine_type="a3-highgpu-8g",
        accelerator_type="NVIDIA_H100_80GB",
        accelerator_count=8,
        replica_count=3,
        reduction_server_replicas=4,
        reduction_server_machine_type="n1-highcpu-16",
        region="europe-west4",
        mode="spot",
        strategy="ddp",
        precision="bf16",
        micro_batch_size=1,
        gradient_accumulation_steps=2,
        timeout_seconds=7200,
    )
    job = custom_job(golden_request(), plan, SETTINGS, "run-abc")
    pools = job["job_spec"]["worker_pool_specs"]
    assert [p.get("replica_count") for p in pools] == [1, 2, 4]
    assert pools[0]["machine_spec"] == {
        "machine_type": "a3-highgpu-8g",
        "accelerator_type": "NVIDIA_H100_80GB",
        "accelerator_count": 8,
    }
    assert pools[0]["container_spec"]["image_uri"] == SETTINGS.trainer_image
    assert pools[1]["container_spec"] == pools[0]["container_spec"]
    args = pools[0]["container_spec"]["args"]
    assert "--strategy=ddp" in args
    assert {"--batch-size=64", "--micro-batch-size=1", "--gradient-accumulation-steps=2"} <= set(args)
    assert pools[2]["container_spec"] == {
        "image_uri": "europe-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
    }
    assert job["job_spec"]["scheduling"] == {
        "strategy": "SPOT",
        "timeout": {"seconds": 7200},
        "restart_job_on_worker_restart": True,
    }
    assert job["labels"][RUN_LABEL] == "run-abc"
    assert job["job_spec"]["base_output_directory"]["output_uri_prefix"] == "gs://landfall-landing/runs/run-abc/"


def test_custom_job_single_cpu_node_has_no_accelerator_and_no_extra_pools() -> None:
    plan = golden_plan()
    job = custom_job(golden_request(), plan, SETTINGS, "run-abc")
    assert len(job["job_spec"]["worker_pool_specs"]) == 1
    assert job["job_spec"]["worker_pool_specs"][0]["machine_spec"] == {"machine_type": plan.machine_type}
    assert job["job_spec"]["scheduling"] == {
        "strategy": "SPOT" if plan.spot else "STANDARD",
        "timeout": {"seconds": plan.timeout_seconds},
    }
    with pytest.raises(ValueError, match="plan the request again"):
        custom_job(golden_request(), replace(plan, global_batch_size=32, micro_batch_size=32), SETTINGS, "run-abc")


def test_a_transaction_that_keeps_colliding_is_transient() -> None:
    """The client raises a bare ValueError after its attempts; it must be retried, not dropped as unexpected."""
    from functions.errors import TransientError
    from functions.gcp.firestore_tx import in_transaction

    class Ref:
        path = "runs/r1"

    class Client:
        calls = 0

        def transaction(self, max_attempts: int) -> object:
            Client.calls += 1
            raise ValueError(f"Failed to commit transaction in {max_attempts} attempts.")

    pauses: list[float] = []
    with pytest.raises(TransientError, match="kept colliding"):
        in_transaction(Client(), Ref(), lambda cur: (None, None), attempts=6, sleep=pauses.append)
    # Each attempt is its own transaction, after a random pause (full jitter) so colliding writers fall out of step.
    assert Client.calls == 6 and len(pauses) == 5
    assert all(0 <= p <= min(2.0, 0.05 * 2 ** (i + 1)) for i, p in enumerate(pauses)), pauses


def test_a_transaction_writes_only_the_fields_that_changed() -> None:
    """Unchanged fields are not encoded again, maps field by field; dropped ones are deleted; equal values of another
    type are written."""
    from google.cloud import firestore

    from functions.gcp.firestore_tx import changed_fields

    plan = {"machine": "a2-highgpu-1g", "alternatives": [{"gpus": 1, "cost": 2.5}]}
    current = {
        "state": "PLANNED",
        "submission": {"fallbacks": [plan], "attempts": [], "lease": {"owner": "a"}},
        "metrics": {"loss": 1, "seen": 2},
        "flag": 1,
        "retry_of": "r0",
        "odd.key": 1,
        "emptied": {"a": 1},
    }
    new = {
        "state": "SUBMITTED",
        "submission": {"fallbacks": [dict(plan)], "attempts": [{"n": 1}], "lease": {"owner": "a"}},
        "metrics": {"loss": 1.0},
        "flag": True,
        "odd.key": 2,
        "emptied": {},
        "added": {"x": 1},
    }
    fields = changed_fields(current, new)
    assert fields == {
        "state": "SUBMITTED",
        "submission.attempts": [{"n": 1}],
        "metrics.loss": 1.0,
        "metrics.seen": firestore.DELETE_FIELD,
        "flag": True,
        "`odd.key`": 2,
        "emptied": {},
        "added": {"x": 1},
        "retry_of": firestore.DELETE_FIELD,
    }
    assert changed_fields(new, dict(new)) == {}
