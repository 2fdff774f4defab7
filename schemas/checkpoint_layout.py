"""The checkpoint folder's layout Landfall reads (docs/trainer-contract.md, "The layout Landfall reads"): each
checkpoint in a folder `step-N` (N in nine digits), counted only once its commit record `commit.json` is there,
written last. The built-in trainer writes it; a team's code may follow it, and then its runs resume and extend like
Landfall's own."""

from __future__ import annotations

import re

STEP_FILE = re.compile(r"(?:^|/)step-(\d{9})/([^/]+)$")
"""A file of a checkpoint folder `step-N` and its name."""
COMMIT = "commit.json"
"""Written last into a checkpoint's folder: only a folder holding it counts as a checkpoint to resume from."""


def committed_step(name: str) -> int | None:
    """The step of the checkpoint whose commit record `name` (an object's or file's path) is, else None."""
    match = STEP_FILE.search(name)
    if match is None or match.group(2) != COMMIT:
        return None
    return int(match.group(1))


__all__ = ["COMMIT", "STEP_FILE", "committed_step"]
