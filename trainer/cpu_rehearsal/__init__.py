"""The CPU rehearsal switch for a team's CUDA-only code on the local stack (sitecustomize.py says what it maps)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from trainer.cpu_rehearsal.sitecustomize import REHEARSAL_ENV

SITE_FOLDER = Path(__file__).resolve().parent
"""Put first on a process's Python path, its sitecustomize.py runs before the process's own first line."""


def rehearsal_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What a team's processes add to their environment: the folder first on PYTHONPATH when REHEARSAL_ENV is 1,
    nothing otherwise."""
    if environ.get(REHEARSAL_ENV) != "1":
        return {}
    rest = environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": f"{SITE_FOLDER}{':' + rest if rest else ''}"}


__all__ = ["REHEARSAL_ENV", "SITE_FOLDER", "rehearsal_env"]
