"""Checkpoints in AIP_CHECKPOINT_DIR (gs:// or local): written whole, then marked complete, never loaded half-written.

Layout: ROOT/step-000000120/state.pt, then ROOT/step-000000120/COMPLETE (a small JSON marker) once state.pt is
fully written. Only directories with the marker count; the newest one is resumed from; the last k are kept.
A state holds model, optimizer, scheduler, scaler, step, data position, per-rank RNG states and the config.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from typing import Any

import torch

from trainer import storage
from trainer.logs import log

_STEP_DIR = re.compile(r"(?:^|/)step-(\d{9})/(state\.pt|COMPLETE)$")
MARKER = "COMPLETE"
STATE = "state.pt"


class CheckpointStore:
    """The checkpoints under one root URI."""

    def __init__(self, root: str, keep: int) -> None:
        self.root = root if root.endswith("/") else root + "/"
        self.keep = keep

    def _dir(self, step: int) -> str:
        return storage.join(self.root, f"step-{step:09d}")

    def _listing(self) -> tuple[set[int], set[int]]:
        """(steps with a marker, every step seen)."""
        complete: set[int] = set()
        seen: set[int] = set()
        if not storage.is_gcs(self.root) and not os.path.isdir(self.root):
            return complete, seen
        for uri in storage.list_files(self.root):
            match = _STEP_DIR.search(uri)
            if match:
                step = int(match.group(1))
                seen.add(step)
                if match.group(2) == MARKER:
                    complete.add(step)
        return complete, seen

    def complete_steps(self) -> list[int]:
        return sorted(self._listing()[0])

    def latest(self) -> int | None:
        steps = self.complete_steps()
        return steps[-1] if steps else None

    def load(self, step: int) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="landfall-ckpt-") as tmp:
            path = os.path.join(tmp, STATE)
            storage.download_file(storage.join(self._dir(step), STATE), path)
            state = torch.load(path, map_location="cpu", weights_only=False)
        if not isinstance(state, dict):
            raise TypeError(
                f"{storage.join(self._dir(step), STATE)}: expected a checkpoint dict, got {type(state).__name__}"
            )
        return state

    def save(self, step: int, state: dict[str, Any]) -> str:
        """Write state for step, then its marker, then prune; returns the checkpoint's URI."""
        started = time.monotonic()
        target = self._dir(step)
        with tempfile.TemporaryDirectory(prefix="landfall-ckpt-") as tmp:
            path = os.path.join(tmp, STATE)
            torch.save(state, path)
            size = os.path.getsize(path)
            storage.upload_file(path, storage.join(target, STATE))
        marker = {"step": step, "bytes": size, "written_at": time.time()}
        storage.write_bytes(storage.join(target, MARKER), json.dumps(marker).encode(), "application/json")
        log("checkpoint saved", step=step, uri=target + "/", bytes=size, seconds=round(time.monotonic() - started, 3))
        self.prune()
        return target

    def prune(self) -> None:
        """Keep the newest `keep` complete checkpoints; drop older ones and abandoned partial ones."""
        complete, seen = self._listing()
        kept = sorted(complete)[-self.keep :]
        newest = kept[-1] if kept else -1
        for step in sorted(seen):
            if step in kept or (step not in complete and step > newest):
                continue
            storage.delete_tree(self._dir(step))
