"""`landfall dead-letters`' report of one message (pure): source, attempts, body preview, and the reason, taken
from the function's parser, else from the function's log line that names the body's digest."""

from __future__ import annotations

import json

from functions.envelopes import BODY_DIGEST_LABEL, body_digest
from landfall.dead_letter_report import (
    DELIVERY_COUNT,
    SOURCE_PUBLISH_TIME,
    SOURCE_SUBSCRIPTION,
    body_reason,
    describe,
    log_reason,
    preview,
)

FUNCTIONS = {
    "landfall-training-requests-dispatch": "dispatch",
    "landfall-job-events-listener": "on_job_event",
    "landfall-object-events-ingest": "on_object_finalized",
    "landfall-reconcile-reconciler": "reconcile_runs",
}


def attrs(subscription: str, **own: str) -> dict[str, str]:
    return {SOURCE_SUBSCRIPTION: subscription, DELIVERY_COUNT: "15", SOURCE_PUBLISH_TIME: "2026-11-23T10:00:00Z", **own}


def test_preview_collapses_whitespace_cuts_long_bodies_and_names_binary_ones() -> None:
    assert preview(b'{"a":\n  1}') == '{"a": 1}'
    assert len(preview(b"x" * 500)) == 80 and preview(b"x" * 500).endswith("...")
    assert preview(b"\xff\xfe") == "<2 bytes, not UTF-8>"


def test_each_function_body_is_checked_with_its_own_parser() -> None:
    assert body_reason("dispatch", b"{not json", {})[0] is True
    unreadable, said = body_reason(
        "dispatch", b'{"dataset": {"uri": "gs://b/p/"}, "task": "tabular-classification"}', {}
    )
    assert unreadable and said.startswith("not a TrainingRequest: ") and "model" in said
    good = b'{"dataset": {"uri": "gs://b/p/"}, "task": "tabular-classification", "model": {"preset": "mlp-small"}}'
    assert body_reason("dispatch", good, {}) == (False, body_reason("dispatch", good, {})[1])
    assert "reads as a TrainingRequest (run run-" in body_reason("dispatch", good, {})[1]
    assert body_reason("on_job_event", b"[]", {})[1].startswith("not a job event: ")
    assert body_reason("on_object_finalized", b"{}", {})[1].startswith("not a storage notification: ")
    assert "eventType" in body_reason("on_object_finalized", b"{}", {})[1]
    assert body_reason("reconcile_runs", b"{}", {}) == (False, "")


def test_the_log_line_naming_the_body_digest_is_the_reason() -> None:
    body = b'{"tick": 1}'
    tag = f"{BODY_DIGEST_LABEL}{body_digest(body)})"
    lines = [
        json.dumps({"message": f"reconcile_runs: message 7 ({tag} will be retried: first"}),
        json.dumps({"message": "reconcile_runs: message 8 (body sha256:0000000000000000) will be retried: other"}),
        json.dumps(
            {
                "message": f"reconcile_runs: message 9 ({tag}: unexpected error; will be retried",
                "exception": "Traceback ...\nKeyError: 'x'",
            }
        ),
    ]
    expected = f"reconcile_runs: message 9 ({tag}: unexpected error; will be retried (KeyError: 'x')"
    assert log_reason(lines, body) == expected
    assert log_reason(lines[1:2], body) is None
    source = attrs("projects/p/subscriptions/landfall-reconcile-reconciler")
    report = describe(
        "41",
        body,
        source,
        "2026-11-23T11:00:00Z",
        FUNCTIONS,
        lambda function: lines if function == "reconcile_runs" else [],
    )
    assert report.function == "reconcile_runs" and report.delivery_attempts == 15
    assert report.published_at == "2026-11-23T10:00:00Z" and "KeyError" in report.reason and report.attributes == {}


def test_without_a_parser_error_or_a_log_line_the_report_says_where_to_look() -> None:
    report = describe(
        "5",
        b"{}",
        attrs("landfall-reconcile-reconciler", origin="x"),
        "2026-11-23T11:00:00Z",
        FUNCTIONS,
        lambda function: [],
    )
    assert report.reason.startswith("15 deliveries failed without an acknowledgement")
    assert "reconcile_runs log says which" in report.reason and report.attributes == {"origin": "x"}
    unknown = describe("6", b"x", {}, "2026-11-23T11:00:00Z", FUNCTIONS, lambda function: [])
    assert unknown.function is None and unknown.delivery_attempts is None
    assert unknown.published_at == "2026-11-23T11:00:00Z"
