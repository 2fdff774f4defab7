"""End to end with shards the size real tables have: each CSV shard is about 1 MB, far past the head the dispatcher
reads for its label-column check. One dataset trains to SUCCEEDED; the same data without its label column is
REJECTED naming the columns it has. Both are dropped at once, so they travel the stack together."""

from __future__ import annotations

import json
from typing import Any

import pytest

from deploy.local import stack
from functions.dispatch.dataset_check import HEADER_BYTES
from schemas.run_record import TERMINAL_STATES, RunState
from schemas.training_request import run_id_for
from tests.datagen import csv_text, separable_rows
from tests.polling import wait_for

pytestmark = pytest.mark.e2e
SHARDS = 2
ROWS_PER_SHARD = 40_000
"""About 1 MB a shard (28 to 30 bytes a row)."""


def _drop(bucket: Any, prefix: str, label: str, shards: int = SHARDS) -> str:
    for i in range(shards):
        text = csv_text(separable_rows(ROWS_PER_SHARD, seed=i), label=label)
        assert len(text) > 1_000_000 > 15 * HEADER_BYTES
        bucket.blob(f"{prefix}part-{i:05d}.csv").upload_from_string(text, content_type="text/csv")
    # one pass over the data at a batch that keeps the run short
    overrides = {"hyperparameters": {"epochs": 1, "batch_size": 512}, "model": {"label_column": "churned"}}
    bucket.blob(f"{prefix}landfall.json").upload_from_string(json.dumps(overrides))
    marker = bucket.blob(f"{prefix}_SUCCESS")
    marker.upload_from_string(b"")
    return run_id_for(f"gcs:{bucket.name}/{prefix}:{marker.generation}")


def test_megabyte_shards_train_and_a_missing_label_is_still_refused(
    local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any
) -> None:
    good = _drop(landing_bucket, "datasets/e2e-megabyte-shards/", label="churned")
    unlabelled = _drop(landing_bucket, "datasets/e2e-megabyte-shards-unlabelled/", label="label", shards=1)

    def ended(run_id: str) -> dict[str, Any] | None:
        snap = firestore_runs.document(run_id).get()
        doc = snap.to_dict() if snap.exists else None
        return doc if doc and RunState(doc["state"]) in TERMINAL_STATES else None

    try:
        refused = wait_for(lambda: ended(unlabelled), 120, f"run {unlabelled} to end", step=0.5)
        trained = wait_for(lambda: ended(good), 300, f"run {good} to end", step=0.5)
    except AssertionError:
        logs = local_stack.state_dir / "logs"
        tails = {p.name: p.read_text()[-1500:] for p in sorted(logs.glob("*.log"))}
        docs = {r: firestore_runs.document(r).get().to_dict() for r in (good, unlabelled)}
        raise AssertionError(f"runs: {docs}\n{tails}") from None
    assert refused["state"] == "REJECTED" and refused["error"]["code"] == "missing-label-column", refused["error"]
    assert "its columns are 'a', 'b', 'c', 'label'" in refused["error"]["message"]
    assert not refused.get("submission", {}).get("jobs"), "refused before any job"
    assert trained["state"] == "SUCCEEDED", trained.get("error")
    assert trained["request"]["dataset"]["object_count"] == SHARDS
    assert trained["request"]["dataset"]["total_bytes"] > SHARDS * 1_000_000
    assert trained["metrics"]["final"]["accuracy"] >= 0.9
