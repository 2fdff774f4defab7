"""A retry goes on from where its run stopped: a run cancelled after its first checkpoints is retried with `landfall
retry`, and the retry's trainer resumes from the newest checkpoint in the first run's folder (its line's), records
`resumed_from_step` on its attempt and in its metrics (and the work lost past that checkpoint, shown by `landfall
run`), and SUCCEEDS having trained only the steps that were left."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from deploy.local import provision, stack
from landfall.cli import main as landfall
from schemas.training_request import parse_training_request
from tests import datagen
from tests.e2e.test_chain import _publish, terminal_run
from tests.polling import wait_for

pytestmark = pytest.mark.e2e
EXAMPLES = Path(__file__).resolve().parents[2] / "schemas" / "examples"
PREFIX = "pinned/e2e-retry-resumes/"  # no route watches it: the request below is the only one made for these files
MAX_STEPS = 300
EVERY = 20


def _committed_steps(bucket: Any, run_id: str) -> list[int]:
    names = (b.name for b in bucket.client.list_blobs(bucket, prefix=f"runs/{run_id}/checkpoints/"))
    return sorted(int(m.group(1)) for n in names if (m := re.search(r"step-(\d{9})/commit\.json$", n)))


def _publish_lm_run(
    local_stack: stack.StackInfo,
    bucket: Any,
    key: str,
    prefix: str = PREFIX,
    constraints: dict[str, Any] | None = None,
) -> str:
    """A gpt-tiny request on two text shards under prefix (written once), published; its run id. Its constraints
    default to one CPU machine on demand (fp32, as the stack runs it)."""
    shards = [datagen.text_corpus(600, seed=i) for i in range(2)]
    for i, text in enumerate(shards):
        blob = bucket.blob(f"{prefix}part-{i}.txt")
        if not blob.exists():
            blob.upload_from_string(text, content_type="text/plain")
    request = json.loads((EXAMPLES / "training_request.json").read_text())
    request.update(idempotency_key=key, task="causal-lm", model={"preset": "gpt-tiny"})
    request["dataset"] = {
        "uri": f"gs://{bucket.name}/{prefix}",
        "object_count": len(shards),
        "total_bytes": sum(len(t) for t in shards),
        "formats": ["txt"],
    }
    request["hyperparameters"].update(
        epochs=10,
        batch_size=8,
        learning_rate=0.003,
        max_steps=MAX_STEPS,
        checkpoint_every_steps=EVERY,
        extra={"val_fraction": "0", "warmup_steps": "1"},
    )
    request["constraints"].update(constraints or {"spot": "never", "machine_type": "n2-standard-8"})
    _publish(local_stack, "landfall-training-requests", json.dumps(request).encode())
    return parse_training_request(json.dumps(request)).run_id


def _first_checkpoint(runs: Any, bucket: Any, run_id: str) -> list[int]:
    """Wait until the running run_id has committed a checkpoint; its committed steps."""

    def committed() -> list[int]:
        snap = runs.document(run_id).get()
        doc = snap.to_dict() if snap.exists else {}
        assert doc.get("state") not in ("SUCCEEDED", "FAILED", "CANCELLED", "REJECTED"), (
            doc.get("error"),
            doc.get("metrics"),
        )
        return _committed_steps(bucket, run_id)

    return wait_for(committed, 180, f"run {run_id}'s first committed checkpoint")


def test_a_cancelled_run_s_retry_resumes_from_its_checkpoint_and_trains_only_what_was_left(
    local_stack: stack.StackInfo,
    firestore_runs: Any,
    landing_bucket: Any,
    artifacts_bucket: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(provision, "default_state_dir", lambda: local_stack.state_dir)
    run_id = _publish_lm_run(local_stack, landing_bucket, "e2e-retry-resumes")
    _first_checkpoint(firestore_runs, artifacts_bucket, run_id)
    assert landfall(["cancel", run_id, "--by", "e2e"]) == 0
    cancelled = terminal_run(firestore_runs, run_id, timeout_s=90)
    assert cancelled["state"] == "CANCELLED", cancelled.get("error")
    saved = max(_committed_steps(artifacts_bucket, run_id))
    assert 0 < saved < MAX_STEPS, f"the run was cancelled after it ended its training ({saved} steps)"

    # As if the run had trained 9 steps past that checkpoint and been killed with no time to save them: the mark its
    # rank 0 keeps of how far it got (trainer/checkpoint.py ProgressMark), which the retry reads as work lost.
    mark = {"step": saved + 9, "since_step": saved, "seconds": 12.5}
    artifacts_bucket.blob(f"runs/{run_id}/checkpoints/progress.json").upload_from_string(json.dumps(mark))

    capsys.readouterr()
    assert landfall(["retry", run_id, "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["checkpoint_lineage"] == run_id
    retry = terminal_run(firestore_runs, said["run_id"], timeout_s=300)
    assert retry["state"] == "SUCCEEDED", retry.get("error")
    metrics = retry["metrics"]
    assert metrics["resumed_from_step"] == saved and metrics["steps"] == MAX_STEPS
    assert retry["submission"]["attempts"][-1]["resumed_from_step"] == saved
    assert (metrics["work_lost_steps"], metrics["work_lost_seconds"]) == (9, 12.5)
    capsys.readouterr()
    assert landfall(["run", said["run_id"]]) == 0
    shown = f"progress  resumed at step {saved} of {MAX_STEPS}; work lost: 9 steps (about 12s)"
    assert shown in capsys.readouterr().out
    # the line's folder holds the retry's checkpoints too; the retry's own folder holds none
    assert max(_committed_steps(artifacts_bucket, run_id)) > saved
    assert _committed_steps(artifacts_bucket, said["run_id"]) == []


def test_a_run_that_timed_out_is_retried_from_its_checkpoint_or_from_scratch(
    local_stack: stack.StackInfo,
    firestore_runs: Any,
    landing_bucket: Any,
    artifacts_bucket: Any,
    faults: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two runs end FAILED `timeout` after a checkpoint (the emulator's job_timeout fault, kept on: their plan's
    timeout as if it had been too short, and their continuation's too, so that it trains nothing); `landfall retry` of
    one resumes from its checkpoint, `--from-scratch` of the other starts at step 0 in a folder of its own."""
    from deploy.vertex_emulator import control

    monkeypatch.setattr(provision, "default_state_dir", lambda: local_stack.state_dir)
    resumed_id = _publish_lm_run(local_stack, landing_bucket, "e2e-timeout-retry-resumes")
    scratch_id = _publish_lm_run(local_stack, landing_bucket, "e2e-timeout-retry-from-scratch")
    for run_id in (resumed_id, scratch_id):
        _first_checkpoint(firestore_runs, artifacts_bucket, run_id)
    # 0.2 s: each continuation is cut before its trainer has started (it installs its SIGTERM handler about a second
    # in, and one that has would train a step before stopping, which is progress and earns another extension)
    control.set_faults(faults, {"job_timeout": {"after_seconds": 0.2}})
    try:
        ended = [terminal_run(firestore_runs, run_id, timeout_s=90) for run_id in (resumed_id, scratch_id)]
    finally:
        control.set_faults(faults, {})
    for doc in ended:
        assert (doc["state"], doc["error"].get("reason")) == ("FAILED", "timeout"), doc.get("error")
        # its job timed out while training advanced, so the run went on once; the next job, cut at once by the same
        # fault, trained nothing it could keep
        assert doc["submission"]["extension"]["number"] == 1
        assert "Not continued: its training did not advance" in doc["error"]["message"], doc["error"]
    saved = max(_committed_steps(artifacts_bucket, resumed_id))

    capsys.readouterr()
    assert landfall(["retry", resumed_id, "--json"]) == 0
    resumed = json.loads(capsys.readouterr().out)
    assert landfall(["retry", scratch_id, "--from-scratch", "--json"]) == 0
    scratch = json.loads(capsys.readouterr().out)
    assert (resumed["checkpoint_lineage"], scratch.get("checkpoint_lineage") or "") == (resumed_id, "")

    docs = [terminal_run(firestore_runs, r["run_id"], timeout_s=300) for r in (resumed, scratch)]
    for doc in docs:
        assert doc["state"] == "SUCCEEDED", doc.get("error")
        assert doc["metrics"]["steps"] == MAX_STEPS
    assert docs[0]["metrics"]["resumed_from_step"] >= saved > 0  # the newest checkpoint of the line
    assert docs[0]["submission"]["attempts"][-1]["resumed_from_step"] == docs[0]["metrics"]["resumed_from_step"]
    assert docs[1]["metrics"]["resumed_from_step"] == 0
    assert _committed_steps(artifacts_bucket, scratch["run_id"])  # its own folder, not the line's
