"""A run whose job reaches its timeout while its training advances is not failed: it goes on as its next attempt
from its newest checkpoint, with a timeout worked out from what the job measured, and SUCCEEDS (docs/runs.md, "A
timeout while training advanced").

The job's plan is as optimistic as a time model 3 times too fast: the emulator's job_timeout fault ends the running
job for its timeout once it has committed checkpoints (as Vertex would at a scheduling.timeout too short for its real
pace). The fault is lifted once that job has ended, before the continuation starts."""

from __future__ import annotations

from typing import Any

import pytest

from deploy.local import provision, stack
from landfall.cli import main as landfall
from tests.e2e.test_chain import terminal_run
from tests.e2e.test_retry_resumes import MAX_STEPS, _committed_steps, _first_checkpoint, _publish_lm_run
from tests.polling import wait_for

pytestmark = pytest.mark.e2e


def test_a_job_that_times_out_while_training_advances_goes_on_from_its_checkpoint_and_succeeds(
    local_stack: stack.StackInfo,
    firestore_runs: Any,
    landing_bucket: Any,
    artifacts_bucket: Any,
    faults: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from deploy.vertex_emulator import control
    from functions.wiring import vertex_jobs

    monkeypatch.setattr(provision, "default_state_dir", lambda: local_stack.state_dir)
    run_id = _publish_lm_run(local_stack, landing_bucket, "e2e-timeout-continues")
    first = _first_checkpoint(firestore_runs, artifacts_bucket, run_id)
    doc = firestore_runs.document(run_id).get().to_dict()
    region, job_name = doc["vertex"]["region"], doc["vertex"]["job_name"]
    client = vertex_jobs()._client(region)

    control.set_faults(faults, {"job_timeout": {"after_seconds": 1.0}})
    try:
        wait_for(
            lambda: client.get_custom_job(name=job_name).state.name == "JOB_STATE_FAILED",
            60,
            f"job {job_name} to reach its (fault's) timeout",
        )
    finally:
        control.set_faults(faults, {})
    ended = client.get_custom_job(name=job_name)
    assert "scheduling timeout" in ended.error.message, ended.error

    done = terminal_run(firestore_runs, run_id, timeout_s=300)
    assert done["state"] == "SUCCEEDED", done.get("error")
    assert "FAILED" not in [h["state"] for h in done["history"]]
    submission = done["submission"]
    ext = submission["extension"]
    assert (ext["number"], ext["job_name"], ext["region"]) == (1, job_name, region)
    assert ext["from_step"] >= max(first) > 0 and ext["steps_per_second"] > 0
    assert [(j["job_name"], j["reason"]) for j in submission["jobs"]] == [(job_name, "timeout")]
    last = submission["attempts"][-1]
    assert last["reason"] == "timeout-extended" and last["plan"]["timeout_seconds"] == ext["timeout_seconds"]
    # the next job went on from that checkpoint with the timeout the extension worked out
    assert done["metrics"]["resumed_from_step"] == ext["from_step"] == last["resumed_from_step"]
    assert done["metrics"]["steps"] == MAX_STEPS
    second = client.get_custom_job(name=done["vertex"]["job_name"])
    assert second.name != job_name
    assert second.job_spec.scheduling.timeout.total_seconds() == ext["timeout_seconds"]
    assert max(_committed_steps(artifacts_bucket, run_id)) > ext["from_step"]
    # the cost counts both jobs
    assert done["cost"]["actual_usd"] >= ext["spent_usd"]
    capsys.readouterr()
    assert landfall(["run", run_id]) == 0
    shown = capsys.readouterr().out
    assert f"extended  once: job {job_name.rsplit('/', 1)[-1]} reached its timeout at step {ext['from_step']}" in shown
