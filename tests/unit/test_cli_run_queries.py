"""Every query `landfall runs` makes has its composite index in deploy/firestore.indexes.json, and `landfall run`
draws the loss curve with plotext."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from landfall.commands import runs

INDEXES = Path(__file__).resolve().parents[2] / "deploy" / "firestore.indexes.json"


def _listed() -> set[tuple[tuple[str, str], ...]]:
    return {tuple((f["fieldPath"], f["order"]) for f in index["fields"])
            for index in json.loads(INDEXES.read_text())["indexes"] if index["collectionGroup"] == "runs"}


@pytest.mark.parametrize("state, dataset, since", list(itertools.product(
    (None, "FAILED"), (None, "gs://b/p/"), (None, "2026-11-22T10:00:00.000000Z"))))
def test_every_runs_query_has_its_composite_index(state: str | None, dataset: str | None, since: str | None) -> None:
    filters = runs.run_filters(state, dataset, since)
    equalities = tuple((name, "ASCENDING") for name, op, _ in filters if op == "==")
    assert all(name == "created_at" for name, op, _ in filters if op != "=="), "a range on another field than the order"
    if equalities:  # equality filters with an order on another field need a composite index
        assert (*equalities, ("created_at", "DESCENDING")) in _listed(), f"no index for {filters}"


def test_since_is_normalised_to_the_stored_form_and_bad_times_are_refused() -> None:
    assert runs.since_argument("2026-11-22T11:00:00+01:00") == "2026-11-22T10:00:00.000000Z"
    with pytest.raises(Exception, match="RFC 3339"):
        runs.since_argument("yesterday")


def test_loss_curve_is_drawn_from_the_epochs() -> None:
    chart = runs.loss_curve({"epochs": [{"epoch": 1, "loss": 0.9}, {"epoch": 2, "loss": 0.4},
                                        {"epoch": 3, "loss": 0.1}]})
    assert chart is not None and "loss" in chart and len(chart.splitlines()) >= 8
    assert runs.loss_curve({"epochs": [{"epoch": 1, "loss": None}]}) is None
