"""Every entry point of functions/main.py, fed CloudEvents of any shape (Pub/Sub pushes with random bytes, JSON that
is not an object, missing keys, wrong types, base64 garbage, huge strings; storage events with hostile resources):
acknowledged with a readable reason, or retried only for a TransientError naming the dependency that was not ready.
Never an unexpected exception (retried for half an hour), never a retry for bad input (redelivered until then).
"""

from __future__ import annotations

import json
from datetime import timedelta

from hypothesis import event, given
from hypothesis import strategies as st

from functions.errors import TransientError
from tests.fakes import world
from tests.unit.fuzz import strategies as s
from tests.unit.fuzz.harness import Fakes, assert_readable, deliver, firestore_storable

ANY_PAYLOAD = s.json_bytes()


@given(
    st.one_of(s.notification_events(s.object_names()), s.storage_events(s.object_names()), s.pubsub_events(ANY_PAYLOAD))
)
def test_on_object_finalized_acknowledges_any_event_with_a_reason(event) -> None:
    fakes = Fakes()
    decision = deliver("on_object_finalized", event, fakes)
    assert decision.acknowledged, f"an object event was retried with nothing pending: {decision.reason}"
    assert_readable(decision.reason)
    assert fakes.ingest.published == [], "an empty bucket published a request"


@given(s.pubsub_events(s.mostly(s.training_requests.map(s.dumps), ANY_PAYLOAD)))
def test_dispatch_acknowledges_any_message_with_a_reason_and_storable_records(event) -> None:
    fakes = Fakes()
    decision = deliver("dispatch", event, fakes)
    assert decision.acknowledged, f"a request was retried with every dependency up: {decision.reason}"
    assert_readable(decision.reason)
    for run_id, doc in fakes.runs.runs.docs.items():
        assert firestore_storable(doc), f"run {run_id} cannot be written to Firestore: {str(doc)[:500]}"


@given(s.pubsub_events(s.mostly(s.job_events, ANY_PAYLOAD)))
def test_on_job_event_acknowledges_or_waits_for_the_dispatcher_only(event) -> None:
    decision = deliver("on_job_event", event)
    if not decision.acknowledged:
        assert decision.reason.startswith("no run records job "), decision.reason
    assert_readable(decision.reason)


@given(s.pubsub_events(ANY_PAYLOAD))
def test_sweep_and_reconcile_ticks_acknowledge_any_message(event) -> None:
    for entry_point in ("sweep_datasets", "reconcile_runs"):
        decision = deliver(entry_point, event)
        assert decision.acknowledged, f"{entry_point} retried an idle tick: {decision.reason}"
        assert_readable(decision.reason)


JOB_STATES = (
    "JOB_STATE_PENDING",
    "JOB_STATE_RUNNING",
    "JOB_STATE_SUCCEEDED",
    "JOB_STATE_FAILED",
    "JOB_STATE_CANCELLED",
    "JOB_STATE_EXPIRED",
)


def _naming(data: bytes, job_id: str) -> bytes:
    """The entry with its job id replaced by job_id, where it has the place for one."""
    try:
        entry = json.loads(data)
        entry["resource"]["labels"]["job_id"] = job_id
    except (ValueError, RecursionError, TypeError, KeyError, IndexError):
        return data
    return s.dumps(entry)


@given(s.job_events, st.sampled_from([0, 5, 11, 60 * 24]), st.booleans(), st.sampled_from(JOB_STATES))
def test_a_job_log_entry_moves_only_its_own_run_and_never_retries_bad_input(
    data: bytes, minutes_ago: int, ours: bool, state: str
) -> None:
    """Against a world with one submitted run: an entry naming its job brings the run in line with Vertex; any other
    entry is acknowledged, or retried only while the dispatcher may still be recording a real job (10 minutes)."""
    w = world.World()
    assert w.deliver() == "submitted"
    (job_name,) = w.vertex.jobs
    w.vertex.set_state(job_name, state)
    if ours:
        data = _naming(data, job_name.rsplit("/", 1)[-1])
    before = w.doc()
    try:
        outcome = w.job_event("", data=data, published_ago=timedelta(minutes=minutes_ago))
    except TransientError as exc:
        assert minutes_ago <= 10 and str(exc).startswith("no run records job "), (minutes_ago, str(exc))
        event("retried: job not recorded yet")
        return
    event(outcome.split(":")[0])
    if outcome.startswith("ignored:"):
        assert w.doc() == before
    else:
        job_id = job_name.rsplit("/", 1)[-1]
        assert json.loads(data)["resource"]["labels"]["job_id"] == job_id, outcome
