"""Outcomes as typed terms: a delivery's Outcome prints as the text the dispatcher always returned, and a
SubmissionAttempt's stored outcome text reads as an AttemptOutcome that writes the same text back."""

from __future__ import annotations

import pytest

from functions.dispatch.outcomes import Outcome, Said
from schemas.run_record import AttemptKind, AttemptOutcome


@pytest.mark.parametrize(
    ("text", "kind", "detail"),
    [
        ("pending", AttemptKind.PENDING, ""),
        ("created", AttemptKind.CREATED, ""),
        ("created canary", AttemptKind.CREATED_CANARY, ""),
        (
            "capacity: ZONE_RESOURCE_POOL_EXHAUSTED in us-central1",
            AttemptKind.CAPACITY,
            "ZONE_RESOURCE_POOL_EXHAUSTED in us-central1",
        ),
        ("rate-limited: quota: 60 a minute", AttemptKind.RATE_LIMITED, "quota: 60 a minute"),
        ("refused: ", AttemptKind.REFUSED, ""),
        ("edited by hand", AttemptKind.OTHER, "edited by hand"),
    ],
)
def test_a_stored_attempt_outcome_reads_as_its_term_and_writes_the_same_text(
    text: str, kind: AttemptKind, detail: str
) -> None:
    read = AttemptOutcome.read(text)
    assert (read.kind, read.detail, read.text) == (kind, detail, text)


def test_only_vertex_refusals_made_no_job() -> None:
    assert {k for k in AttemptKind if k.refused_by_vertex} == {AttemptKind.CAPACITY, AttemptKind.RATE_LIMITED}


def test_a_delivery_outcome_prints_as_kind_or_kind_and_detail() -> None:
    assert str(Outcome(Said.SUBMITTED)) == "submitted"
    assert str(Outcome(Said.REJECTED, "invalid-request")) == "rejected:invalid-request"
    assert str(Outcome(Said.RECOVERED, str(Outcome(Said.SUBMITTED, "cancel-pending")))) == (
        "recovered:submitted:cancel-pending"
    )
    assert str(Outcome(Said.LOST_CLAIM)) == "lost-claim"
