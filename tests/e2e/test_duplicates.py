"""The same bytes are not trained twice by accident, end to end: objects uploaded through google-cloud-storage, real
notifications to the ingest function, Firestore records, `landfall dataset` and `landfall retrain` run as a user
runs them, and the dispatcher receiving the retrain's request."""

from __future__ import annotations

import argparse
import uuid
from functools import partial
from typing import Any

import pytest

from deploy.local import stack
from landfall.cli import build_parser
from schemas.dataset_record import DatasetStatus, dataset_id_for
from tests.polling import wait_for

pytestmark = pytest.mark.e2e
SHARDS = (b"x0,x1,label\n0.1,0.2,0\n", b"x0,x1,label\n0.9,0.8,1\n")


def landfall(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    args: argparse.Namespace = build_parser().parse_args(list(argv))
    code = args.func(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_same_objects_marked_again_are_a_duplicate_and_retrain_makes_a_new_run(
    local_stack: stack.StackInfo, landing_bucket: Any, firestore_runs: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from google.cloud import firestore

    datasets = firestore.Client(project=local_stack.env["GOOGLE_CLOUD_PROJECT"]).collection("datasets")
    prefix = f"ingest-only/same-bytes-{uuid.uuid4().hex[:8]}/"
    uri = f"gs://{landing_bucket.name}/{prefix}"
    record = datasets.document(dataset_id_for(landing_bucket.name, prefix))

    def dataset_when(check: Any, what: str) -> dict[str, Any]:
        def ready() -> dict[str, Any] | None:
            snapshot = record.get()
            doc = snapshot.to_dict() if snapshot.exists else None
            return doc if doc and check(doc) else None

        return wait_for(ready, 60, f"{uri} {what}")

    def upload_dataset() -> None:
        for i, shard in enumerate(SHARDS):
            landing_bucket.blob(f"{prefix}part-{i}.csv").upload_from_string(shard)
        landing_bucket.blob(f"{prefix}_SUCCESS").upload_from_string(b"")

    upload_dataset()
    first = dataset_when(lambda d: d["status"] == DatasetStatus.REQUESTED, "to be REQUESTED")
    first_run = first["version"]["run_id"]

    upload_dataset()  # the export runs again: the same bytes, new generations, a new marker
    duplicate = dataset_when(lambda d: d["status"] == DatasetStatus.DUPLICATE, "to be DUPLICATE")
    assert duplicate["version"]["duplicate_of"] == first_run
    assert duplicate["version"]["generation"] != first["version"]["generation"]
    assert f"the same objects as the version trained as run {first_run}" in duplicate["reason"]

    code, out, _ = landfall(capsys, "dataset", uri)
    assert code == 0
    assert "status    DUPLICATE" in out and f"duplicate of {first_run}" in out
    assert f"`landfall retrain {uri}` trains them again on purpose" in out

    code, out, err = landfall(capsys, "retrain", uri)
    assert (code, err) == (0, "")
    retrained = dataset_when(lambda d: d["version"]["kind"] == "retrain", "to record the retrain")
    retrain_run = retrained["version"]["run_id"]
    assert retrained["status"] == DatasetStatus.REQUESTED
    assert retrained["version"]["idempotency_key"].endswith(":retrain-1")
    assert f"requested run {retrain_run}" in out
    assert retrain_run != first_run

    # The dispatcher got both requests: two runs (rejected for the route's tiny budget: no training is paid for),
    # and none for the duplicate.
    def run(run_id: str) -> dict[str, Any] | None:
        snapshot = firestore_runs.document(run_id).get()
        return snapshot.to_dict() if snapshot.exists else None

    for run_id in (first_run, retrain_run):
        doc = wait_for(partial(run, run_id), 60, f"run {run_id} to be recorded")
        assert doc["request"]["dataset"]["uri"] == uri
    assert run(duplicate["version"]["run_id"]) is None
    assert run(retrain_run)["request"]["source"]["kind"] == "retrain"  # type: ignore[index]
