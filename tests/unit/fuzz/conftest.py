"""Every test here is a fuzz property (`-m fuzz`): bounded by the `ci` profile in `make test`, long in `make fuzz`."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/fuzz/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.fuzz)
