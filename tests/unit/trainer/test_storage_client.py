"""The trainer's storage client follows STORAGE_EMULATOR_HOST as it is now, not as it was at the first call.

A test session ran the integration suite's fake-gcs-server, then the whole stack's: load_model reached the first
server (404) through a client cached for the whole process."""

from __future__ import annotations

import pytest

from trainer import storage


def test_one_client_per_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:4443")
    first = storage.client()
    assert storage.client() is first
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:5553")
    second = storage.client()
    assert second is not first
    assert "5553" in second._connection.API_BASE_URL and "4443" in first._connection.API_BASE_URL
