"""functions/wiring.py's measurements prefetch: the plan takes the read started ahead for its request (one query,
not two), plans without one as before, and a read that failed ahead is handled as the plan's own read would be."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from functions import wiring
from functions.errors import TransientError


class Store:
    def __init__(self, fail: bool = False) -> None:
        self.queries: list[str] = []
        self.fail = fail

    def for_workload(self, key: str) -> list[Any]:
        self.queries.append(key)
        if self.fail:
            raise TransientError("Firestore unavailable")
        return []

    def newest(self) -> list[Any]:
        self.queries.append("newest")
        return []


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Store:
    s = Store()
    monkeypatch.setattr(wiring, "measurements_store", lambda: s)
    monkeypatch.setattr("schemas.measurement.workload_key", lambda request: f"key-{request.run_id}")
    wiring._PREFETCHED.clear()
    return s


def test_the_plan_takes_the_read_started_for_its_request(store: Store) -> None:
    request = SimpleNamespace(run_id="run-a")
    wiring._prefetch(request)
    assert wiring._measured(request) == []
    assert sorted(store.queries) == ["key-run-a", "newest"], "one query of each: the prefetched ones"
    assert wiring._measured(request) == [] and sorted(store.queries) == ["key-run-a"] * 2 + ["newest"] * 2, "once"


def test_without_a_prefetch_the_plan_reads_itself(store: Store) -> None:
    assert wiring._measured(SimpleNamespace(run_id="run-b")) == []
    assert store.queries == ["key-run-b", "newest"]


def test_a_failed_read_ahead_plans_from_the_model_as_before(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    store.fail = True
    request = SimpleNamespace(run_id="run-c")
    wiring._prefetch(request)
    assert wiring._measured(request) == []
    assert "measurements not read, planning from the model" in caplog.text


def test_prefetches_are_bounded(store: Store) -> None:
    for i in range(wiring.PREFETCH_KEPT + 10):
        wiring._prefetch(SimpleNamespace(run_id=f"run-{i}"))
    assert len(wiring._PREFETCHED) == wiring.PREFETCH_KEPT
