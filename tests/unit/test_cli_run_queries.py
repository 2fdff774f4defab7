"""`landfall runs --since` takes RFC 3339 times, and `landfall run` draws the loss curve with plotext (that every
query has its composite index is tests/unit/test_deploy_bundles.py's)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from landfall.commands import runs


def test_since_is_normalised_to_the_stored_form_and_bad_times_are_refused() -> None:
    assert runs.since_argument("2026-11-22T11:00:00+01:00") == datetime(2026, 11, 22, 10, tzinfo=UTC)
    with pytest.raises(Exception, match="RFC 3339"):
        runs.since_argument("yesterday")


def test_loss_curve_is_drawn_from_the_epochs() -> None:
    chart = runs.loss_curve(
        {"epochs": [{"epoch": 1, "loss": 0.9}, {"epoch": 2, "loss": 0.4}, {"epoch": 3, "loss": 0.1}]}
    )
    assert chart is not None and "loss" in chart and len(chart.splitlines()) >= 8
    assert runs.loss_curve({"epochs": [{"epoch": 1, "loss": None}]}) is None
