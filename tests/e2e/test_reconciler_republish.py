"""End to end: a TrainingRequest ingest recorded as published but whose message was lost before the
dispatcher saw it is published again by the reconciler, through the stack's own Pub/Sub, and becomes one run.

The loss is staged: the version document is written as ingest leaves it after publishing (PUBLISHED, the request
kept, `answered: False`, an hour old) and no message is sent. The request's budget is below any plan, so its run is
REJECTED at once: what is checked is that the run exists, once, not training."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deploy.local import provision, stack
from landfall import cli
from schemas.dataset_record import dataset_id_for
from schemas.dataset_version import parse_dataset_version
from schemas.run_record import TERMINAL_STATES, RunState
from schemas.times import format_timestamp
from schemas.training_request import parse_training_request
from tests.polling import wait_for

pytestmark = pytest.mark.e2e


def test_a_lost_request_is_republished_by_the_reconciler_and_makes_one_run(
    local_stack: stack.StackInfo, firestore_runs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.cloud import firestore
    from google.cloud.firestore_v1.base_query import FieldFilter

    monkeypatch.setattr(provision, "default_state_dir", lambda: local_stack.state_dir)
    tag = uuid.uuid4().hex[:8]
    uri = f"gs://{local_stack.env['LANDFALL_LANDING_BUCKET']}/ingest-only/e2e-lost-{tag}/"
    request = parse_training_request(
        {
            "idempotency_key": f"gcs:e2e-lost-{tag}",
            "task": "tabular-classification",
            "model": {"preset": "mlp-small"},
            "dataset": {"uri": uri, "object_count": 1, "total_bytes": 1000, "formats": ["csv"]},
            "constraints": {"budget_usd": 0.0000001},
        }
    )
    versions = firestore.Client(project=local_stack.env["GOOGLE_CLOUD_PROJECT"]).collection("dataset_versions")
    an_hour_ago = format_timestamp(datetime.now(UTC) - timedelta(hours=1))
    bucket = local_stack.env["LANDFALL_LANDING_BUCKET"]
    prefix = f"ingest-only/e2e-lost-{tag}/"
    # Written through the schema, as ingest writes it: a document missing a field ingest always writes would be
    # logged as unreadable and skipped by the reconciler, not republished.
    lost = parse_dataset_version(
        {
            "schema_version": 1,
            "run_id": request.run_id,
            "idempotency_key": request.idempotency_key,
            "dataset_id": dataset_id_for(bucket, prefix),
            "uri": uri,
            "route": "ingest-only",
            "kind": "marker",
            "completed_by": f"{uri}_SUCCESS",
            "generation": "1",
            "status": "PUBLISHED",
            "message_id": "lost",
            "request": request.to_dict(),
            "answered": False,
            "reason": "",
            "created_at": an_hour_ago,
            "updated_at": an_hour_ago,
            "claim_until": an_hour_ago,
            "owner": "ingest",
        }
    )
    versions.document(request.run_id).set(lost.to_dict())
    assert cli.main(["reconcile"]) == 0  # the scheduler ticks every second on this stack as well

    def ended() -> dict[str, Any] | None:
        snap = firestore_runs.document(request.run_id).get()
        return snap.to_dict() if snap.exists and RunState(snap.to_dict()["state"]) in TERMINAL_STATES else None

    run = wait_for(ended, 60, f"run {request.run_id} from the republished request", step=0.2)
    assert run["state"] == "REJECTED" and run["request"]["idempotency_key"] == request.idempotency_key, run
    version = wait_for(
        lambda: (d := versions.document(request.run_id).get().to_dict()) and d.get("answered") and d,
        30,
        "the version marked answered",
        step=0.2,
    )
    assert version["republished_count"] == 1 and version["last_republished_message_id"] != "lost"
    same = firestore_runs.where(filter=FieldFilter("request.dataset.uri", "==", uri)).get()
    assert [s.id for s in same] == [request.run_id]
