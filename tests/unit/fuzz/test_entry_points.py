"""Every entry point of functions/main.py, fed CloudEvents of any shape (Pub/Sub pushes with random bytes, JSON that
is not an object, missing keys, wrong types, base64 garbage, huge strings; storage events with hostile resources):
acknowledged with a readable reason, or retried only for a TransientError naming the dependency that was not ready.
Never an unexpected exception (retried for half an hour), never a retry for bad input (redelivered until then).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.unit.fuzz import strategies as s
from tests.unit.fuzz.harness import Fakes, assert_readable, deliver, firestore_storable

ANY_PAYLOAD = s.json_bytes()


@given(st.one_of(s.notification_events(s.object_names()), s.storage_events(s.object_names()),
                 s.pubsub_events(ANY_PAYLOAD)))
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
