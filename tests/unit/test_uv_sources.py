"""scripts/uv_sources.py: pip's package sources become `uv pip install` flags, so `make install` with uv takes
torch's CPU build and the constraints from the same places pip does."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "scripts" / "uv_sources.py"
spec = importlib.util.spec_from_file_location("uv_sources", SCRIPT)
assert spec is not None and spec.loader is not None
uv_sources = importlib.util.module_from_spec(spec)
spec.loader.exec_module(uv_sources)


def test_pips_sources_become_uv_flags() -> None:
    config = {
        "find-links": "/opt/wheels",
        "extra-index-url": "file:///opt/a/simple file:///opt/b/simple",
        "constraint": "/etc/xdg/pip/constraints.txt",
        "cert": "/etc/ssl/certs/ca-certificates.crt",
        "default-timeout": "180",
    }
    assert uv_sources.uv_flags(config) == [
        "--index-strategy",
        "unsafe-best-match",
        "--extra-index-url",
        "file:///opt/a/simple",
        "--extra-index-url",
        "file:///opt/b/simple",
        "--find-links",
        "/opt/wheels",
        "--constraint",
        "/etc/xdg/pip/constraints.txt",
        "--system-certs",
    ]


def test_without_pip_configuration_only_pips_index_strategy_is_kept() -> None:
    assert uv_sources.uv_flags({}) == ["--index-strategy", "unsafe-best-match"]
