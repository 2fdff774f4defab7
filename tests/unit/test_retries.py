"""`landfall retry`'s pure rules: the retry key (a table), the claim on the old run (set once), the request it
publishes, and the dispatcher recording `retry_of` on the new run; the run record keeps both links."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from functions.records.retries import RetryClaim, claim_retry, not_retryable_reason, retry_request
from schemas.run_record import RunRecord, RunState, new_run, parse_run_record
from schemas.training_request import MAX_KEY_CHARS, parse_training_request, retry_key, run_id_for
from tests.fakes.world import NOW, REQUEST, REQUEST_JSON, World


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("gcs:b/p/:17", "gcs:b/p/:17~retry-1"),
        ("gcs:b/p/:17~retry-1", "gcs:b/p/:17~retry-2"),
        ("gcs:b/p/:17~retry-9", "gcs:b/p/:17~retry-10"),
        ("key~retry-x", "key~retry-x~retry-1"),  # not a retry number: the whole key is the base
        ("content:abc:retrain-2", "content:abc:retrain-2~retry-1"),
    ],
)
def test_retry_key_counts_from_the_first_key(key: str, expected: str) -> None:
    assert retry_key(key) == expected


def test_a_retry_key_that_would_be_too_long_is_hashed_and_stays_deterministic() -> None:
    long_key = "k" * MAX_KEY_CHARS
    first = retry_key(long_key)
    assert len(first) <= MAX_KEY_CHARS and first.startswith("retry:") and first.endswith("~retry-1")
    assert retry_key(long_key) == first and retry_key(first).endswith("~retry-2")
    assert parse_training_request({**REQUEST.to_dict(), "idempotency_key": first}).idempotency_key == first


def ended(state: RunState) -> RunRecord:
    return replace(new_run(REQUEST.run_id, REQUEST.to_dict(), now=NOW), state=state)


def test_the_claim_is_set_once_and_only_on_a_failed_or_cancelled_run() -> None:
    new_id = run_id_for(retry_key(REQUEST.idempotency_key))
    record, (claim, after) = claim_retry(new_id, now=NOW)(ended(RunState.FAILED))
    assert claim == RetryClaim.CLAIMED and record is not None and after is not None
    assert record.retried_by == new_id == after.retried_by
    assert record.state == RunState.FAILED and len(record.history) == 1, "a claim is no state change"
    again, (claim, after) = claim_retry("run-other", now=NOW)(record)
    assert again is None and claim == RetryClaim.ALREADY and after is not None and after.retried_by == new_id
    assert claim_retry(new_id, now=NOW)(ended(RunState.CANCELLED))[1][0] == RetryClaim.CLAIMED
    for state in (RunState.SUCCEEDED, RunState.REJECTED, RunState.RUNNING, RunState.WAITING):
        assert claim_retry(new_id, now=NOW)(ended(state)) == (None, (RetryClaim.NOT_RETRYABLE, ended(state)))
        assert f"is {state}" in (not_retryable_reason(ended(state)) or "")
    assert claim_retry(new_id, now=NOW)(None) == (None, (RetryClaim.MISSING, None))


def test_the_retry_request_is_the_same_request_under_the_next_key_naming_the_old_run() -> None:
    request = retry_request(ended(RunState.FAILED), NOW)
    assert request.idempotency_key == REQUEST.idempotency_key + "~retry-1" and request.retry_of == REQUEST.run_id
    assert request.source.kind == "retry" and request.created_at
    assert (request.dataset, request.model, request.hyperparameters, request.constraints) == (
        REQUEST.dataset,
        REQUEST.model,
        REQUEST.hyperparameters,
        REQUEST.constraints,
    )
    assert parse_training_request(request.to_json()) == request


def test_the_dispatcher_records_retry_of_on_the_new_run() -> None:
    data = json.loads(REQUEST_JSON)
    data.update(idempotency_key=retry_key(REQUEST.idempotency_key), retry_of=REQUEST.run_id)
    w = World()
    assert w.deliver(json.dumps(data).encode()) == "submitted"
    run = w.run(run_id_for(data["idempotency_key"]))
    assert run.retry_of == REQUEST.run_id and run.retried_by is None and run.request["retry_of"] == REQUEST.run_id


def test_the_links_round_trip_and_are_absent_from_the_document_when_unset() -> None:
    plain = ended(RunState.FAILED)
    assert "retry_of" not in plain.to_document() and "retried_by" not in plain.to_document()
    linked = replace(plain, retry_of="run-a", retried_by="run-c")
    assert parse_run_record(linked.to_document()) == linked
    assert linked.to_dict()["retry_of"] == "run-a" and linked.to_dict()["retried_by"] == "run-c"


def test_a_content_key_does_not_change_with_the_retry_of_field() -> None:
    """Fields added later count in a content key only when set: a published content keeps its run id."""
    body = {"dataset": {"uri": "gs://b/p/"}, "task": "tabular-classification", "model": {"preset": "mlp-small"}}
    plain = parse_training_request(body)
    assert plain.idempotency_key == parse_training_request({**body, "retry_of": ""}).idempotency_key
    assert plain.idempotency_key != parse_training_request({**body, "retry_of": "run-a"}).idempotency_key
