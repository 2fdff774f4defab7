"""A capacity fallback to another world size goes on from the checkpoint: a built-in run on 2 nodes x 2 processes is
preempted (Spot) after its first committed checkpoint until Vertex gives up on it with its stockout message; the
dispatcher falls back to its next plan, 2 nodes x 1 process, whose trainer resumes from that checkpoint with the
global batch kept (world size 4 -> 2, through the micro-batch), its loss going on from where it was, and SUCCEEDS.
The script example (a team's code) does the same through the same fallback."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from deploy.local import persistence, stack
from deploy.vertex_emulator import control
from deploy.vertex_emulator.logs import replica_log_path
from functions.gcp.vertex import RUN_LABEL
from schemas.training_request import parse_training_request
from tests.e2e.test_chain import _publish, terminal_run
from tests.e2e.test_retry_resumes import EVERY, MAX_STEPS, _committed_steps, _publish_lm_run
from tests.polling import wait_for

pytestmark = pytest.mark.e2e
SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "ddp_script" / "train.py"
PREFIX = "pinned/e2e-fallback-resumes/"  # no route watches it: the request below is the only one made for these files
REGION = "us-central1"
GLOBAL_BATCH = 8
PINS = {
    "replica_count": 2,
    "gpu_allowlist": ["NVIDIA_L4"],
    "regions": [REGION],
    "spot": "required",
    "max_gpus": 4,
    "prefer": "fastest",
}
"""The fastest L4 plan on 2 machines within 4 GPUs is 2 x g2-standard-24 (2 L4 each: 4 processes); its fallbacks in
the one region allowed are the 1-L4 machines (2 processes). Spot only, so the emulator preempts it."""
LOGGED_BY = 60
"""A checkpoint at or past this step comes after the trainer logged its training loss (every 50 steps)."""
PRIMARY = "workerpool0-0"
VOCABULARY_LOSS = math.log(256)
"""A byte-level model's loss before it has learned anything (uniform over 256 bytes)."""


def _losses(state_dir: Path, job_id: str) -> list[tuple[int, float]]:
    """(step, training loss) of each step the job's primary replica logged, in order, across its restarts."""
    path = replica_log_path(persistence.vertex_dir(state_dir), job_id, PRIMARY)
    records = (json.loads(line) for line in path.read_text().splitlines() if line.startswith("{"))
    return [(r["step"], r["loss"]) for r in records if r.get("message") == "training"]


def _world(plan: dict[str, Any]) -> int:
    return int(plan["accelerator_count"]) * int(plan["replica_count"])


def test_a_fallback_to_another_world_size_resumes_from_the_checkpoint_and_succeeds(
    local_stack: stack.StackInfo,
    firestore_runs: Any,
    landing_bucket: Any,
    artifacts_bucket: Any,
    faults: str,
) -> None:
    from functions.wiring import vertex_jobs

    run_id = _publish_lm_run(local_stack, landing_bucket, "e2e-fallback-resumes", PREFIX, PINS)

    def logged_checkpoint() -> list[int]:
        snap = firestore_runs.document(run_id).get()
        doc = snap.to_dict() if snap.exists else {}
        assert doc.get("state") not in ("SUCCEEDED", "FAILED", "CANCELLED", "REJECTED"), doc.get("error")
        return [step for step in _committed_steps(artifacts_bucket, run_id) if step >= LOGGED_BY]

    wait_for(logged_checkpoint, 300, f"run {run_id}'s checkpoint at step {LOGGED_BY} or later")
    # Preempted every second, past Vertex's six restarts: the job FAILS with the stockout message.
    control.set_faults(faults, {"spot_preemption": {"after_seconds": 1.0, "times": 7, "grace_seconds": 1.0}})

    def failed_job() -> Any:
        jobs = [j for j in vertex_jobs().list_labelled(REGION) if j.labels.get(RUN_LABEL) == run_id]
        return next((j for j in jobs if j.state == "JOB_STATE_FAILED"), None)

    first = wait_for(failed_job, 120, f"run {run_id}'s first job to fail for capacity", step=0.1)
    control.set_faults(faults, {})
    saved = max(_committed_steps(artifacts_bucket, run_id))
    assert 0 < saved < MAX_STEPS, f"the run ended its training before it was preempted ({saved} steps)"

    doc = terminal_run(firestore_runs, run_id, timeout_s=420)
    assert doc["state"] == "SUCCEEDED", doc.get("error")
    jobs = doc["submission"]["jobs"]
    assert jobs[0]["job_name"] == first.name and jobs[0]["reason"] == "stockout", jobs
    attempts = doc["submission"]["attempts"]
    assert _world(attempts[0]["plan"]) == 4 and _world(doc["plan"]) == 2, (attempts[0]["plan"], doc["plan"])
    assert attempts[-1]["plan"]["machine_type"] == doc["plan"]["machine_type"] != "g2-standard-24"
    metrics = doc["metrics"]
    # the checkpoint the fallback resumed from is the newest the first job committed (its SIGTERM may add one)
    resumed = metrics["resumed_from_step"]
    assert saved <= resumed < MAX_STEPS and attempts[-1]["resumed_from_step"] == resumed, (saved, attempts[-1])
    assert metrics["steps"] == MAX_STEPS and metrics["world_size"] == 2
    assert metrics["batch"]["global_batch_size"] == GLOBAL_BATCH and metrics["batch"]["processes"] == 2

    # The loss goes on from where it was: the fallback's first steps are near the first job's at the checkpoint,
    # far from an untrained model's.
    before = [loss for step, loss in _losses(local_stack.state_dir, first.job_id) if step <= resumed]
    after = _losses(local_stack.state_dir, doc["vertex"]["job_id"])
    assert before and after and after[0][0] > resumed, (before[-3:], after[:3])
    at_checkpoint = sum(before[-3:]) / len(before[-3:])
    assert abs(after[0][1] - at_checkpoint) < (VOCABULARY_LOSS - at_checkpoint) / 2, (at_checkpoint, after[:3])

    # What each job met is recorded for the planner (schemas/capacity_event.py): the first job's Spot machines
    # were refused (Vertex's stockout) after they ran; the fallback's ran to its end.
    events = {e.event_id: e for e in capacity_events(local_stack, run_id)}
    met = events[f"job-{first.job_id}"]
    assert (met.outcome, met.mode, met.accelerator_type, met.nodes, met.region) == (
        "stockout",
        "spot",
        "NVIDIA_L4",
        2,
        REGION,
    ), met
    assert met.lost_seconds > 0 and met.running_hours == 0, met
    last = events[f"job-{doc['vertex']['job_id']}"]
    assert (last.outcome, last.machine_type, last.nodes) == ("succeeded", doc["plan"]["machine_type"], 2), last
    assert last.running_hours > 0, last


def capacity_events(local_stack: stack.StackInfo, run_id: str) -> list[Any]:
    """The run's capacity events as the dispatcher reads them (the same collection, the schema's parse)."""
    from google.cloud import firestore
    from google.cloud.firestore_v1.base_query import FieldFilter

    from deploy.topology import load_topology
    from schemas.capacity_event import parse_capacity_event

    client = firestore.Client(project=local_stack.env["GOOGLE_CLOUD_PROJECT"])
    collection = client.collection(load_topology().capacity_events_collection)
    found = collection.where(filter=FieldFilter("run_id", "==", run_id)).stream()
    return [parse_capacity_event(d.to_dict()) for d in found]


def test_the_script_example_resumes_across_a_fallback_to_another_world_size(
    local_stack: stack.StackInfo,
    firestore_runs: Any,
    landing_bucket: Any,
    artifacts_bucket: Any,
    faults: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """examples/ddp_script checkpoints with torch.distributed.checkpoint; after the same fallback as above its
    launcher says LANDFALL_RESUME_STEP and the script goes on from there at world size 2."""
    from functions.wiring import vertex_jobs
    from landfall.cli import build_parser
    from landfall.commands.submit import code_request

    prefix = "byoc/e2e-fallback-resumes/"
    rows = "".join(f"{i},{i % 7},{2 * i - 3}\n" for i in range(80))
    landing_bucket.blob(prefix + "part-0.csv").upload_from_string("a,b,y\n" + rows, content_type="text/csv")
    steps = 400
    argv = ["submit", "--script", str(SCRIPT), "--data", f"gs://{landing_bucket.name}/{prefix}"]
    # heavy enough for the planner that the 4-GPU shape is the fastest (and under the first-run canary's 2 hours)
    argv += ["--params", "10000000", "--flops-per-sample", "1e12", "--samples", "20000"]
    argv += ["--batch-size", str(GLOBAL_BATCH), "--key", "e2e-script-fallback-resumes"]
    argv += [f"--arg={a}" for a in ("--epochs", str(steps), "--lr", "0.00001", "--pause", "0.05")]
    request = code_request(build_parser().parse_args(argv))
    request["hyperparameters"]["checkpoint_every_steps"] = EVERY
    request["constraints"] = PINS
    run_id = parse_training_request(json.dumps(request)).run_id
    _publish(local_stack, "landfall-training-requests", json.dumps(request).encode())

    def saved_by_the_script() -> Any:
        jobs = [j for j in vertex_jobs().list_labelled(REGION) if j.labels.get(RUN_LABEL) == run_id]
        for job in jobs:
            path = replica_log_path(persistence.vertex_dir(local_stack.state_dir), job.job_id, PRIMARY)
            if path.is_file() and '"checkpoint saved"' in path.read_text():
                return job
        return None

    first = wait_for(saved_by_the_script, 300, f"the script of run {run_id} to save a checkpoint", step=0.2)
    control.set_faults(faults, {"spot_preemption": {"after_seconds": 1.0, "times": 7, "grace_seconds": 10.0}})
    wait_for(
        lambda: vertex_jobs().get(first.name).state == "JOB_STATE_FAILED" or None,
        120,
        f"run {run_id}'s first job to fail for capacity",
        step=0.1,
    )
    control.set_faults(faults, {})
    saved = max(_committed_steps(artifacts_bucket, run_id))  # what its SIGTERM saved, copied back by its launcher

    doc = terminal_run(firestore_runs, run_id, timeout_s=420)
    assert doc["state"] == "SUCCEEDED", doc.get("error")
    attempts = doc["submission"]["attempts"]
    assert _world(attempts[0]["plan"]) == 4 and _world(doc["plan"]) == 2, (attempts[0]["plan"], doc["plan"])
    metrics = doc["metrics"]
    assert metrics["trainer"] == "script" and metrics["world_size"] == 2
    assert 0 < saved <= metrics["resumed_from_step"] < steps, (saved, metrics["resumed_from_step"])
    assert attempts[-1]["resumed_from_step"] == metrics["resumed_from_step"]
    curve = metrics["loss_curve"]
    assert curve[0]["step"] == metrics["resumed_from_step"] + 1 and curve[-1]["step"] == steps
    untrained = sum((2 * i - 3) ** 2 for i in range(80)) / 80  # about what an untrained model's first step loses
    assert curve[0]["loss"] < untrained / 4, (curve[0], untrained)
