"""End to end: runs end in their true state through the real local stack and the Vertex emulator's faults.
A stockout after submission is resubmitted on the next plan; a job that ends while the listener is down is recorded
by a reconcile pass; `landfall cancel` stops a running job; ten datasets in flight when the dispatcher is killed all
succeed with one job each; job events duplicated and out of order leave the record right; an out-of-memory exit ends
with its reason and the trainer's message; capacity refused everywhere waits, then succeeds once it is back. Each
test is bounded (about 90 s on a quiet machine; the ten, 240 s).

The killed dispatcher, the stopped listener and the replayed job events run a team's own container (the own-image
route of routes.toml): exactly-once submission and the reconciler hold for user code as for the built-in
trainer (whose own exactly-once proof under a restarted dispatcher is test_stack_lifecycle.py), and no training
is paid for where nobody checks it."""

from __future__ import annotations

import json
import os
import re
import signal
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from deploy.local import processes, provision, stack
from deploy.vertex_emulator import control
from functions.gcp.vertex import RUN_LABEL, JobView
from landfall import cli
from landfall.synthetic import separable_csv_shards
from schemas.run_finished import RunFinished, parse_run_finished
from schemas.run_record import TERMINAL_STATES, RunState
from schemas.training_request import run_id_for
from tests.e2e.conftest import OWN_IMAGE
from tests.polling import wait_for

pytestmark = pytest.mark.e2e

REGION = "us-central1"
"""Where the planner puts the default tabular route's CPU plans (every candidate: a stockout there refuses them all)."""
ENDED = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED")


@pytest.fixture
def cli_env(local_stack: stack.StackInfo, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(provision, "default_state_dir", lambda: local_stack.state_dir)
    yield


def _tap(local_stack: stack.StackInfo, topic: str) -> Iterator[Any]:
    """A pull subscription on `topic`, made before the run starts (a topic keeps nothing by itself)."""
    from google.cloud import pubsub_v1

    project = local_stack.env["GOOGLE_CLOUD_PROJECT"]
    subscriber = pubsub_v1.SubscriberClient()
    path = subscriber.subscription_path(project, f"e2e-{topic}-{uuid.uuid4().hex[:6]}")
    subscriber.create_subscription(name=path, topic=f"projects/{project}/topics/{topic}")
    yield subscriber, path
    subscriber.delete_subscription(subscription=path)


@pytest.fixture
def run_results(local_stack: stack.StackInfo) -> Iterator[Any]:
    yield from _tap(local_stack, "landfall-run-results")


@pytest.fixture
def job_events(local_stack: stack.StackInfo) -> Iterator[Any]:
    yield from _tap(local_stack, "landfall-job-events")


def _finished(run_results: Any, run_id: str, timeout_s: float = 30, linger_s: float = 5) -> list[RunFinished]:
    """Every RunFinished for run_id: waits up to timeout_s for the first, then linger_s more for any duplicate."""
    subscriber, path = run_results
    seen: list[RunFinished] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        answer = subscriber.pull(subscription=path, max_messages=10, timeout=5)
        if answer.received_messages:
            subscriber.acknowledge(subscription=path, ack_ids=[m.ack_id for m in answer.received_messages])
        mine = [
            parse_run_finished(m.message.data)
            for m in answer.received_messages
            if m.message.attributes.get("run_id") == run_id
        ]
        if mine and not seen:
            deadline = time.monotonic() + linger_s
        seen += mine
    return seen


def _drop(bucket: Any, prefix: str, *, epochs: int | None = None, seconds: float | None = None) -> str:
    """Two CSV shards and the marker under prefix; epochs (the built-in trainer's) or seconds (own_image_trainer's
    run time, under own-image/) in a landfall.json."""
    for i, text in enumerate(separable_csv_shards(shards=2, rows_per_shard=100)):
        bucket.blob(f"{prefix}part-{i:05d}.csv").upload_from_string(text, content_type="text/csv")
    if epochs is not None:
        bucket.blob(f"{prefix}landfall.json").upload_from_string(json.dumps({"hyperparameters": {"epochs": epochs}}))
    if seconds is not None:
        overrides = {"trainer": {"args": ["--seconds", str(seconds)]}}
        bucket.blob(f"{prefix}landfall.json").upload_from_string(json.dumps(overrides))
    marker = bucket.blob(f"{prefix}_SUCCESS")
    marker.upload_from_string(b"")
    return run_id_for(f"gcs:{bucket.name}/{prefix}:{marker.generation}")


def _model_versions(local_stack: stack.StackInfo, doc: dict[str, Any]) -> list[Any]:
    """The Model Registry versions labelled with the run (stock ModelServiceClient against the Vertex emulator):
    the model's registration must make exactly one, whichever deliveries and passes reached the run."""
    import grpc
    from google.cloud import aiplatform_v1
    from google.cloud.aiplatform_v1.services.model_service.transports import ModelServiceGrpcTransport

    from schemas.model_version import RUN_LABEL as MODEL_RUN_LABEL
    from schemas.model_version import label_value

    assert doc.get("model"), f"run {doc['run_id']} names no model version: {doc.get('model')}"
    client = aiplatform_v1.ModelServiceClient(
        transport=ModelServiceGrpcTransport(channel=grpc.insecure_channel(local_stack.env["LANDFALL_VERTEX_ENDPOINT"]))
    )
    wanted = f'labels.{MODEL_RUN_LABEL}="{label_value(doc["run_id"])}"'
    request = aiplatform_v1.ListModelVersionsRequest(name=doc["model"]["model"], filter=wanted)
    return list(client.list_model_versions(request=request))


def _doc(runs: Any, run_id: str) -> dict[str, Any] | None:
    snap = runs.document(run_id).get()
    return snap.to_dict() if snap.exists else None


def _terminal(runs: Any, run_id: str, timeout_s: float = 90) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        doc = _doc(runs, run_id)
        return doc if doc and RunState(doc["state"]) in TERMINAL_STATES else None

    return wait_for(done, timeout_s, f"run {run_id} to end", step=0.2)


def _jobs_of(run_id: str) -> list[JobView]:
    from functions.wiring import vertex_jobs

    return [j for j in vertex_jobs().list_labelled(REGION) if j.labels.get(RUN_LABEL) == run_id]


def _job(run_id: str, states: tuple[str, ...], timeout_s: float = 60) -> JobView:
    return wait_for(
        lambda: next((j for j in _jobs_of(run_id) if j.state in states), None),
        timeout_s,
        f"a job of {run_id} in {states}",
        step=0.05,
    )


def test_a_stockout_after_submission_is_resubmitted_and_succeeds_with_both_attempts(
    local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any, faults: str, run_results: Any
) -> None:
    control.set_faults(faults, {"stockout": [{"region": REGION}]})
    run_id = _drop(landing_bucket, "datasets/e2e-stockout/")
    first = _job(run_id, ("JOB_STATE_FAILED",))  # accepted in REGION (the first plan's), then FAILED for capacity
    control.set_faults(faults, {})  # before the listener hears of it and resubmits
    doc = _terminal(firestore_runs, run_id)
    assert doc["state"] == "SUCCEEDED", doc.get("error")
    jobs = doc["submission"]["jobs"]
    assert jobs[0]["job_name"] == first.name and jobs[0]["reason"] == "stockout", jobs
    assert "Resources are insufficient" in jobs[0]["message"]
    assert doc["vertex"]["job_name"] != first.name
    # job_ids names the earlier attempts' jobs (their late events are ignored); vertex names the current one.
    assert doc["submission"]["job_ids"][0] == first.job_id
    assert doc["vertex"]["job_id"] not in doc["submission"]["job_ids"]
    from functions.wiring import vertex_jobs

    # The next plan may be in another region: the job the run names is read where it is.
    assert vertex_jobs().get(doc["vertex"]["job_name"]).state == "JOB_STATE_SUCCEEDED"
    # One RunFinished for the run on landfall-run-results (its redeliveries and reconcile passes publish no more).
    [finished] = _finished(run_results, run_id)
    assert (finished.state, finished.reason) == ("SUCCEEDED", "") and finished.metrics == doc["metrics"]
    assert _doc(firestore_runs, run_id)["submission"]["results_published"] is True  # type: ignore[index]


def test_a_job_that_ends_while_the_listener_is_stopped_is_recorded_by_a_reconcile_pass(
    local_stack: stack.StackInfo,
    firestore_runs: Any,
    landing_bucket: Any,
    cli_env: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_id = _drop(landing_bucket, "own-image/e2e-listener-down/", seconds=6)
    _job(run_id, ("JOB_STATE_PENDING", "JOB_STATE_RUNNING"))
    listener = next(s for s in stack.read_state(local_stack.state_dir) if s.name == "on_job_event")
    processes.stop(listener)
    try:
        assert not any(j.state in ENDED for j in _jobs_of(run_id)), "the job ended before the listener stopped"
        ended = _job(run_id, ENDED, timeout_s=90)
        assert ended.state == "JOB_STATE_SUCCEEDED"
        capsys.readouterr()
        assert cli.main(["reconcile"]) == 0
        # it waited for the pass its tick started and printed that pass's summary (the scheduler may have run one
        # first, so the counts are not pinned)
        said = capsys.readouterr().out
        assert re.fullmatch(r"reconcile pass \(message \d+\): \S.*\n", said), said
        doc = _terminal(firestore_runs, run_id, timeout_s=60)
        assert doc["state"] == "SUCCEEDED" and doc["vertex"]["job_name"] == ended.name
        assert (doc["metrics"]["trainer"], doc["metrics"]["steps"]) == ("image", 2), doc
        registered = wait_for(lambda: (_doc(firestore_runs, run_id) or {}).get("model"), 60, "the model registered")
    finally:
        stack.restart("on_job_event", state_dir=local_stack.state_dir)
    history = [step["state"] for step in doc["history"]]
    assert len(history) == len(set(history)), history
    # The restarted listener answers the job's events held while it was down, after the pass registered the model:
    # still one version, and a second pass changes nothing (each model is uploaded once).
    answered = _listener_deliveries(local_stack)
    wait_for(lambda: _listener_deliveries(local_stack) > answered, 60, "the listener to answer the held job events")
    assert cli.main(["reconcile"]) == 0
    final = _doc(firestore_runs, run_id) or {}
    assert final.get("model") == registered
    assert [v.version_id for v in _model_versions(local_stack, final)] == [registered["version_id"]]


def test_cancel_on_a_running_job_ends_job_and_run_cancelled(
    local_stack: stack.StackInfo,
    firestore_runs: Any,
    landing_bucket: Any,
    cli_env: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_id = _drop(landing_bucket, "datasets/e2e-cancel/", epochs=5000)
    running = _job(run_id, ("JOB_STATE_RUNNING",))
    wait_for(lambda: (_doc(firestore_runs, run_id) or {}).get("vertex"), 30, f"run {run_id} to name its job")
    capsys.readouterr()
    assert cli.main(["cancel", run_id, "--by", "e2e"]) == 0
    assert "asked Vertex to cancel job" in capsys.readouterr().out
    cancelled = _job(run_id, ENDED, timeout_s=60)
    assert (cancelled.name, cancelled.state) == (running.name, "JOB_STATE_CANCELLED")
    doc = _terminal(firestore_runs, run_id, timeout_s=60)
    assert doc["state"] == "CANCELLED", doc
    assert doc["error"]["reason"] == "cancelled" and doc["submission"]["cancel"]["by"] == "e2e"
    assert cli.main(["cancel", run_id]) == 0
    assert "already ended CANCELLED" in capsys.readouterr().out


def _service(local_stack: stack.StackInfo, name: str) -> processes.RunningService:
    return next(s for s in stack.read_state(local_stack.state_dir) if s.name == name)


def test_ten_datasets_in_flight_when_the_dispatcher_is_killed_all_succeed_with_one_job_each(
    local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any
) -> None:
    # A short submission lease, so that a claim the killed dispatcher held is taken over in seconds, not two minutes.
    short_lease = {"LANDFALL_SUBMISSION_LEASE_SECONDS": "15"}
    stack.restart("dispatch", state_dir=local_stack.state_dir, extra_env=short_lease)
    try:
        run_ids = [_drop(landing_bucket, f"own-image/e2e-kill-{i}/") for i in range(10)]
        wait_for(lambda: any(_doc(firestore_runs, r) for r in run_ids), 60, "the first run recorded", step=0.05)
        os.killpg(_service(local_stack, "dispatch").pid, signal.SIGKILL)
        in_flight = [
            r
            for r in run_ids
            if (_doc(firestore_runs, r) or {}).get("state") in (None, "RECEIVED", "PLANNED", "SUBMITTING")
        ]
        stack.restart("dispatch", state_dir=local_stack.state_dir, extra_env=short_lease)
        docs = {r: _terminal(firestore_runs, r, timeout_s=240) for r in run_ids}
    finally:
        stack.restart("dispatch", state_dir=local_stack.state_dir)
    assert in_flight, "every run was submitted before the dispatcher was killed: nothing was in flight"
    assert {r: d["state"] for r, d in docs.items()} == dict.fromkeys(run_ids, "SUCCEEDED"), {
        r: d.get("error") for r, d in docs.items()
    }
    jobs = {r: [j.name for j in _jobs_of(r)] for r in run_ids}
    doubled = {r: names for r, names in jobs.items() if len(names) != 1}
    # A run with two jobs was seen once under heavy load (not reproduced since): say everything needed to find why.
    assert not doubled, (
        f"runs with other than one job: {doubled}; their submissions: "
        f"{ {r: docs[r].get('submission') for r in doubled} }\n"
        + _log_tails(local_stack, ("dispatch", "reconcile_runs", "vertex"), lines=60)
    )
    assert all(docs[r]["vertex"]["job_name"] == jobs[r][0] for r in run_ids)
    # the team's container ran, and each run's listing named the version it was made for
    assert all(docs[r]["request"]["trainer"]["image_uri"] == OWN_IMAGE for r in run_ids)
    assert all(docs[r]["metrics"]["final"]["objects"] == 2 for r in run_ids), [docs[r]["metrics"] for r in run_ids]


def _log_tails(local_stack: stack.StackInfo, names: tuple[str, ...], lines: int = 25) -> str:
    """The last lines of some services' logs, for a failure message."""
    out = []
    for name in names:
        text = _service(local_stack, name).log_path.read_text(errors="replace").splitlines()
        out += [f"--- {name}.log", *(line[:400] for line in text[-lines:])]
    return "\n".join(out)


def _listener_deliveries(local_stack: stack.StackInfo) -> int:
    """Job-event deliveries the listener has answered: each logs one `on_job_event: ...` line (functions/main.py)."""
    log = _service(local_stack, "on_job_event").log_path
    return sum('"message": "on_job_event: ' in line for line in log.read_text(errors="replace").splitlines())


def test_job_events_duplicated_and_out_of_order_leave_the_record_right_with_no_step_twice(
    local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any, job_events: Any
) -> None:
    from google.cloud import pubsub_v1

    from schemas.job_event import parse_job_event

    subscriber, tap = job_events
    publisher = pubsub_v1.PublisherClient()
    topic = f"projects/{local_stack.env['GOOGLE_CLOUD_PROJECT']}/topics/landfall-job-events"
    run_id = _drop(landing_bucket, "own-image/e2e-event-replay/")
    job_id = _job(run_id, ("JOB_STATE_PENDING", "JOB_STATE_RUNNING", *ENDED)).job_id
    seen: list[bytes] = []

    def replay(batch: list[bytes]) -> int:
        """Publish each event twice, newest first: duplicated and out of order."""
        futures = [publisher.publish(topic, data) for data in reversed(batch) for _ in range(2)]
        return len([f.result(timeout=30) for f in futures])

    def echo_new_events() -> dict[str, Any] | None:
        """Every new event of the job, published again (twice, reversed) as soon as the tap sees it."""
        received = subscriber.pull(subscription=tap, max_messages=50, timeout=5).received_messages
        if received:
            subscriber.acknowledge(subscription=tap, ack_ids=[m.ack_id for m in received])
        new = [
            m.message.data
            for m in received
            if parse_job_event(m.message.data).job_id == job_id and m.message.data not in seen
        ]
        seen.extend(new)
        replay(new)
        doc = _doc(firestore_runs, run_id)
        return doc if doc and RunState(doc["state"]) in TERMINAL_STATES else None

    try:
        doc = wait_for(echo_new_events, 120, f"run {run_id} to end while its job events are replayed", step=0.2)
    except AssertionError as exc:
        doc = _doc(firestore_runs, run_id) or {}
        raise AssertionError(
            f"{exc}; the run is {doc.get('state')} (history {doc.get('history')}); its jobs: "
            f"{_jobs_of(run_id)}; {len(seen)} events seen; logs:\n"
            + _log_tails(local_stack, ("on_job_event", "reconcile_runs", "bridge"))
        ) from None
    assert doc["state"] == "SUCCEEDED" and doc["metrics"], doc.get("error")
    assert len(seen) >= 2, f"too few job events were seen to replay: {seen}"
    # Late: every event once more, twice and newest first, after the run ended; the listener answers each one.
    answered = _listener_deliveries(local_stack)
    late = replay(seen)
    wait_for(lambda: _listener_deliveries(local_stack) >= answered + late, 60, "the listener to answer the replay")
    final = _doc(firestore_runs, run_id)
    assert final is not None and final["state"] == "SUCCEEDED" and final["metrics"] == doc["metrics"]
    history = [step["state"] for step in final["history"]]
    assert len(history) == len(set(history)), history
    assert final["history"] == doc["history"] and final["vertex"]["job_name"] == doc["vertex"]["job_name"]
    assert len(_model_versions(local_stack, final)) == 1, "the replayed events uploaded the model again"


def test_an_out_of_memory_exit_ends_failed_with_its_reason_and_the_trainers_message(
    local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any
) -> None:
    from tests.e2e.conftest import OOM_MARKER

    run_id = _drop(landing_bucket, f"datasets{OOM_MARKER}")
    doc = _terminal(firestore_runs, run_id)
    assert doc["state"] == "FAILED", doc
    error = doc["error"]
    assert (error["code"], error["reason"], error["kind"], error["exit_code"]) == (
        "job-failed",
        "out-of-memory",
        "OutOfMemory",
        4,
    ), error
    assert error["message"].startswith("out of memory on ") and "lower --micro-batch-size" in error["message"]
    assert "CUDA out of memory" in error["message"] and "non-zero status of 4" in error["job_message"]


def test_capacity_refused_everywhere_waits_then_succeeds_once_the_fault_is_cleared(
    local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any, faults: str
) -> None:
    control.set_faults(faults, {"quota_exhausted": [{}]})  # every region, every machine: CreateCustomJob refused
    run_id = _drop(landing_bucket, "datasets/e2e-no-capacity/")

    def waiting() -> dict[str, Any] | None:
        doc = _doc(firestore_runs, run_id)
        return doc if doc and doc["state"] == "WAITING" else None

    doc = wait_for(waiting, 60, f"run {run_id} to wait for capacity", step=0.1)
    assert "refused for capacity" in doc["submission"]["waiting"]["reason"], doc["submission"]["waiting"]
    assert doc["submission"]["waiting"]["retry_at"] and not _jobs_of(run_id)
    control.set_faults(faults, {})  # capacity is back: the reconciler's next round after retry_at submits
    doc = _terminal(firestore_runs, run_id, timeout_s=120)
    assert doc["state"] == "SUCCEEDED", doc.get("error")
    states = [h["state"] for h in doc["history"]]
    assert states.index("WAITING") < len(states) - 1 - states[::-1].index("SUBMITTED"), states
    assert len(_jobs_of(run_id)) == 1
    refusals = doc["submission"]["refusals"]  # every round that ended WAITING, counted (docs/records.md)
    assert refusals["rounds"] >= 1 and sum(refusals["by_reason"].values()) == refusals["refused"] >= 1, refusals
