"""End to end: a dataset the trainer refuses ends as a FAILED run whose error is the trainer's own line (not only
Vertex's "exited with a non-zero status of 3"), and `landfall logs` prints what the replica wrote."""

from __future__ import annotations

import re
from typing import Any

import pytest

from deploy.local import provision, stack
from landfall import cli
from landfall.commands.demo import upload_dataset
from landfall.synthetic import separable_csv_shards
from schemas.training_request import run_id_for
from tests.e2e.test_chain import terminal_run

pytestmark = pytest.mark.e2e


def test_a_run_the_trainer_refuses_carries_its_reason_and_its_logs(
    local_stack: stack.StackInfo,
    firestore_runs: Any,
    landing_bucket: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A missing label column is refused before paying: REJECTED naming the columns, no job.
    prefix = "datasets/e2e-no-label/"
    shards = [text.replace(",label\n", ",target\n", 1) for text in separable_csv_shards(shards=2, rows_per_shard=50)]
    generation = upload_dataset(landing_bucket.name, prefix, shards)
    refused = terminal_run(firestore_runs, run_id_for(f"gcs:{landing_bucket.name}/{prefix}:{generation}"))
    assert refused["state"] == "REJECTED" and refused["error"]["code"] == "missing-label-column", refused
    assert "'target'" in refused["error"]["message"] and not refused.get("vertex"), refused

    # A fault only reading finds (a short row deep in a shard) is the trainer's to refuse: its reason and its logs.
    prefix = "datasets/e2e-short-row/"
    shards = separable_csv_shards(shards=2, rows_per_shard=50)
    shards[1] += "1.5\n"
    generation = upload_dataset(landing_bucket.name, prefix, shards)
    run_id = run_id_for(f"gcs:{landing_bucket.name}/{prefix}:{generation}")
    doc = terminal_run(firestore_runs, run_id)
    assert doc["state"] == "FAILED", doc
    error = doc["error"]
    assert error["code"] == "job-failed" and error["kind"] == "DataError" and error["reason"] == "bad-data"
    assert "line" in error["message"] and "non-zero status" not in error["message"]
    assert "exited with a non-zero status of 3" in error["job_message"]

    monkeypatch.setattr(provision, "default_state_dir", lambda: local_stack.state_dir)
    capsys.readouterr()
    assert cli.main(["logs", run_id]) == 0
    printed = capsys.readouterr().out  # as text: time, replica, message, the record's fields
    assert re.search(r"^\S+  workerpool0-0  launcher starting", printed, re.M), printed
    assert re.search(r"^\S+  workerpool0-0  ERROR .*error=DataError", printed, re.M), printed
    assert cli.main(["logs", run_id, "--json"]) == 0
    printed = capsys.readouterr().out  # the records as the replica wrote them
    assert '"message": "launcher starting"' in printed and '"error": "DataError"' in printed
    assert cli.main(["run", run_id]) == 0
    assert f"error     job-failed: {error['message']}" in capsys.readouterr().out
