"""End to end: a run whose delivery recorded it (RECEIVED) and then died, its message gone, is taken over by the
reconciler, which does what the dispatcher would under its own account's grants on the enforcing stack: it checks
the dataset in the landing bucket, records the digest of the script in the code bucket, writes the listing the
script reads into the run's folder of the artifacts bucket, and submits; the run SUCCEEDS.

The crash is staged: the run document is written as the dispatcher leaves it after recording (RECEIVED, the request
kept, an hour old, so past any delivery's lease) and no message is sent."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from deploy.local import stack
from landfall.cli import build_parser
from landfall.commands.submit import code_request
from schemas.run_record import new_run
from schemas.training_request import parse_training_request

from .test_chain import terminal_run

pytestmark = pytest.mark.e2e
SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "ddp_script" / "train.py"


def test_a_run_whose_delivery_died_after_recording_it_is_adopted_by_the_reconciler_and_succeeds(
    local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any, artifacts_bucket: Any
) -> None:
    prefix = f"pinned/e2e-adopt-{uuid.uuid4().hex[:8]}/"
    rows = "".join(f"{i},{i % 4},{(5 * i) % 9}\n" for i in range(50))
    landing_bucket.blob(prefix + "part-0.csv").upload_from_string("a,b,y\n" + rows, content_type="text/csv")
    argv = ["submit", "--script", str(SCRIPT), "--data", f"gs://{landing_bucket.name}/{prefix}", "--params", "10"]
    request = parse_training_request(code_request(build_parser().parse_args([*argv, "--arg=--epochs=2"])))
    run = new_run(request.run_id, request.to_dict(), now=datetime.now(UTC) - timedelta(hours=1))
    firestore_runs.document(run.run_id).create(run.to_document())
    doc = terminal_run(firestore_runs, run.run_id, timeout_s=300)
    assert doc["state"] == "SUCCEEDED", doc.get("error")
    assert artifacts_bucket.blob(f"runs/{run.run_id}/data-files.jsonl").exists()
    (code,) = doc["code"]  # read from the code bucket by the reconciler's account
    assert code["uri"] == request.trainer.script and code["crc32c"] and code["generation"]
