"""`landfall retry` (--json) and `landfall cancel` against the Firestore and Pub/Sub emulators: a FAILED run's request
is published again under the next retry key, the old run names its retry, a second call (and a concurrent one) makes
no second run, and a run that has not failed is refused in one line; `landfall run` shows both links. A run with no
job yet is cancelled at once, an ended one is left as it is, and a cancelled run can be retried."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from deploy.local import provision
from deploy.topology import load_topology
from landfall.errors import CommandError
from schemas.run_record import parse_run_record
from schemas.training_request import parse_training_request, retry_key, run_id_for
from tests.conftest import PROJECT, Emulator
from tests.integration.test_cli_runs import GOLDEN, landfall, run_doc

pytestmark = pytest.mark.filterwarnings("ignore:The return_immediately flag is deprecated:DeprecationWarning")
OLD_KEY = GOLDEN["request"]["idempotency_key"]


@pytest.fixture()
def requests_tap(clean_firestore: Emulator, pubsub_emulator: Emulator) -> Iterator[Any]:
    """The topology's topics, and a subscription on the requests topic that sees what `landfall retry` publishes."""
    from google.cloud import pubsub_v1

    from tests.caches import clear_function_caches

    topology = load_topology()
    provision.create_topics(topology, PROJECT)
    subscriber = pubsub_v1.SubscriberClient()
    tap = f"projects/{PROJECT}/subscriptions/retry-tap-{datetime.now(UTC).strftime('%H%M%S%f')}"
    subscriber.create_subscription(name=tap, topic=f"projects/{PROJECT}/topics/{topology.requests_topic}")
    clear_function_caches()
    yield subscriber, tap
    subscriber.delete_subscription(subscription=tap)
    subscriber.close()
    clear_function_caches()


def store_run(run_id: str, state: str, **changes: Any) -> None:
    from google.cloud import firestore

    record = replace(
        parse_run_record(run_doc(run_id, state, "2026-11-20T10:00:00.000000Z", "gs://b/churn/")), **changes
    )
    firestore.Client(project=PROJECT).collection(load_topology().runs_collection).document(run_id).set(
        record.to_document()
    )


def read_run(run_id: str) -> Any:
    from google.cloud import firestore

    doc = firestore.Client(project=PROJECT).collection(load_topology().runs_collection).document(run_id).get()
    stored = doc.to_dict() if doc.exists else None
    return None if stored is None else parse_run_record(stored)


def published(tap: Any, wait_s: float = 10) -> list[Any]:
    """What was published on the requests topic (waiting up to wait_s for the first message)."""
    from google.api_core.exceptions import DeadlineExceeded

    subscriber, path = tap
    try:
        received = subscriber.pull(subscription=path, max_messages=10, timeout=wait_s).received_messages
    except DeadlineExceeded:
        return []
    if received:
        subscriber.acknowledge(subscription=path, ack_ids=[m.ack_id for m in received])
    return [parse_training_request(m.message.data) for m in received]


def test_retry_publishes_the_request_under_the_next_key_and_links_both_runs(
    requests_tap: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    store_run("run-failed", "FAILED")
    code, out = landfall(["retry", "run-failed", "--json"], capsys)
    printed = json.loads(out)
    new_id = run_id_for(f"{OLD_KEY}~retry-1")
    assert code == 0 and printed["run_id"] == new_id and printed["retry_of"] == "run-failed"
    assert printed["idempotency_key"] == f"{OLD_KEY}~retry-1" and printed["already_retried"] is False
    (request,) = published(requests_tap)
    assert request.run_id == new_id and request.retry_of == "run-failed" and request.source.kind == "retry"
    assert request.dataset.uri == "gs://b/churn/" and request.model == parse_training_request(GOLDEN["request"]).model
    assert read_run("run-failed").retried_by == new_id

    # A second call publishes nothing while the new run exists, and says which run retries it.
    store_run(new_id, "RUNNING", retry_of="run-failed")
    code, out = landfall(["retry", "run-failed", "--json"], capsys)
    again = json.loads(out)
    assert code == 0 and again["already_retried"] is True and again["run_id"] == new_id
    assert again["message_id"] is None and again["state"] == "RUNNING" and published(requests_tap, wait_s=2) == []
    code, text = landfall(["retry", "run-failed"], capsys)
    assert f"run run-failed is already retried by run {new_id} (RUNNING)" in text

    code, text = landfall(["run", "run-failed"], capsys)
    assert f"retried   by {new_id}" in text
    code, text = landfall(["run", new_id], capsys)
    assert "retry of  run-failed" in text
    assert json.loads(landfall(["run", new_id, "--json"], capsys)[1])["retry_of"] == "run-failed"


def test_a_retry_of_a_retry_counts_on_from_the_first_key(requests_tap: Any, capsys: pytest.CaptureFixture[str]) -> None:
    first_retry = json.loads(json.dumps(GOLDEN["request"]))
    first_retry.update(idempotency_key=f"{OLD_KEY}~retry-1", retry_of="run-failed")
    store_run("run-retry-1", "CANCELLED", request=first_retry, retry_of="run-failed")
    code, out = landfall(["retry", "run-retry-1", "--json"], capsys)
    assert code == 0 and json.loads(out)["idempotency_key"] == retry_key(f"{OLD_KEY}~retry-1") == f"{OLD_KEY}~retry-2"
    (request,) = published(requests_tap)
    assert request.retry_of == "run-retry-1"


def test_two_retries_at_once_claim_the_run_once(requests_tap: Any) -> None:
    from functions.records.retries import RetryClaim, claim_retry
    from functions.wiring import runs_store

    store_run("run-failed", "FAILED")
    new_id = run_id_for(retry_key(OLD_KEY))
    with ThreadPoolExecutor(4) as pool:
        claims = list(
            pool.map(lambda _: runs_store().apply("run-failed", claim_retry(new_id, now=datetime.now(UTC))), range(4))
        )
    assert sorted(c for c, _ in claims) == sorted([RetryClaim.CLAIMED] + [RetryClaim.ALREADY] * 3)
    assert {None if r is None else r.retried_by for _, r in claims} == {new_id}


@pytest.mark.parametrize("state", ["SUCCEEDED", "RUNNING", "REJECTED"])
def test_a_run_that_did_not_fail_is_refused_in_one_line(
    requests_tap: Any, state: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store_run("run-x", state)
    with pytest.raises(CommandError, match=f"run run-x is {state}.*only FAILED or CANCELLED runs can be retried"):
        landfall(["retry", "run-x"], capsys)
    assert read_run("run-x").retried_by is None and published(requests_tap, wait_s=2) == []
    with pytest.raises(CommandError, match="no run 'run-nope'"):
        landfall(["retry", "run-nope"], capsys)


def test_cancel_before_submission_then_retry(requests_tap: Any, capsys: pytest.CaptureFixture[str]) -> None:
    store_run("run-planned", "PLANNED", vertex=None)
    code, out = landfall(["cancel", "run-planned", "--by", "ops"], capsys)
    assert code == 0 and "run run-planned CANCELLED before submission" in out
    run = read_run("run-planned")
    assert run.state == "CANCELLED" and run.error.reason == "cancelled" and run.submission.cancel.by == "ops"
    assert [h.state for h in run.history][-1] == "CANCELLED"

    code, out = landfall(["cancel", "run-planned"], capsys)
    assert code == 0 and "already ended CANCELLED; nothing changed" in out
    code, out = landfall(["cancel", "run-nope"], capsys)
    assert code == 1 and "no run run-nope" in out

    code, out = landfall(["retry", "run-planned", "--json"], capsys)
    printed = json.loads(out)
    assert code == 0 and printed["retry_of"] == "run-planned" and printed["already_retried"] is False
    (request,) = published(requests_tap)
    assert request.run_id == printed["run_id"] and request.retry_of == "run-planned"
    with pytest.raises(CommandError, match="only FAILED or CANCELLED"):
        store_run("run-done", "SUCCEEDED")
        landfall(["retry", "run-done"], capsys)


def test_cancel_of_a_run_waiting_after_its_jobs_ended_says_so(
    requests_tap: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A WAITING run whose job ended for capacity is not said to be cancelled "before a job was submitted": its
    jobs ended for capacity."""
    from schemas.run_record import JobAttempt, RunState, StateChange, Waiting

    base = parse_run_record(run_doc("run-waiting", "WAITING", "2026-11-20T10:00:00.000000Z", "gs://b/churn/"))
    ended = JobAttempt(
        job_name="projects/p/locations/us-central1/customJobs/7",
        region="us-central1",
        machine_type="g2-standard-8",
        reason="stockout",
        message="no L4 in us-central1",
        at="2026-11-20T10:05:00.000000Z",
    )
    submission = replace(
        base.submission,
        jobs=(ended,),
        waiting=Waiting("no capacity left in any plan", "2026-11-20T10:10:00.000000Z", "2026-11-20T10:06:00.000000Z"),
    )
    history = (*base.history[:3], StateChange(RunState.WAITING, "2026-11-20T10:06:00.000000Z", "stockout"))
    store_run("run-waiting", "WAITING", vertex=None, submission=submission, history=history)
    code, out = landfall(["cancel", "run-waiting", "--by", "ops"], capsys)
    assert code == 0 and "run run-waiting CANCELLED while it waited for capacity (no job was running)" in out
    run = read_run("run-waiting")
    assert run.state == "CANCELLED" and "before a job was submitted" not in run.error.message
    assert "1 job(s) ended, the last for stockout in us-central1" in run.error.message


def test_submitting_content_that_already_ran_names_the_run_its_state_and_how_to_run_it_again(
    requests_tap: Any, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same content again does not say its run "will be" RUN: the run exists, so nothing is
    published, and the command says which run, in what state, and how to run it again on purpose."""
    body = {"dataset": {"uri": "gs://b/churn/"}, "task": "tabular-classification", "model": {"preset": "mlp-small"}}
    path = tmp_path / "request.json"
    path.write_text(json.dumps(body))
    request = parse_training_request(path.read_text())
    assert request.idempotency_key.startswith("content:")
    store_run(request.run_id, "SUCCEEDED", request=request.to_dict())
    code, out = landfall(["submit", str(path)], capsys)
    assert code == 0 and f"run {request.run_id} already exists (SUCCEEDED)" in out
    assert "nothing was published" in out and "idempotency_key of its own" in out and "will be" not in out
    assert published(requests_tap, wait_s=2) == []
    code, out = landfall(["submit", str(path), "--json"], capsys)
    assert json.loads(out) | {"idempotency_key": None} == {
        "run_id": request.run_id,
        "idempotency_key": None,
        "message_id": None,
        "already_exists": True,
        "state": "SUCCEEDED",
    }
    store_run(request.run_id, "FAILED", request=request.to_dict())
    code, out = landfall(["submit", str(path)], capsys)
    assert "already exists (FAILED)" in out and f"`landfall retry {request.run_id}` runs it again" in out


def test_a_retry_goes_on_from_its_line_s_checkpoints_and_from_scratch_starts_a_new_line(
    requests_tap: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    store_run("run-first", "FAILED")
    code, out = landfall(["retry", "run-first", "--json"], capsys)
    assert code == 0 and json.loads(out)["checkpoint_lineage"] == "run-first"
    (retry,) = published(requests_tap)
    assert retry.checkpoint_lineage == "run-first"

    # its own retry stays on the first run's line: one folder holds every checkpoint of the line
    store_run(retry.run_id, "CANCELLED", retry_of="run-first", request=retry.to_dict())
    code, out = landfall(["retry", retry.run_id], capsys)
    assert code == 0 and "going on from the newest checkpoint in run run-first's folder" in out
    (second,) = published(requests_tap)
    assert (second.retry_of, second.checkpoint_lineage) == (retry.run_id, "run-first")

    store_run("run-other", "FAILED")
    code, out = landfall(["retry", "run-other", "--from-scratch", "--json"], capsys)
    assert code == 0 and json.loads(out)["checkpoint_lineage"] is None
    (scratch,) = published(requests_tap)
    assert scratch.checkpoint_lineage == "" and "checkpoint_lineage" not in scratch.to_dict()
    store_run(scratch.run_id, "RUNNING", retry_of="run-other", request=scratch.to_dict())
    code, text = landfall(["run", scratch.run_id], capsys)
    assert "resumes   nothing: it started at step 0 (retried --from-scratch)" in text
