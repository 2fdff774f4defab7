"""Checkpoint store: a checkpoint without its marker is never loaded; the newest complete one wins; k are kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.checkpoint_contract import exercise_checkpoint_store
from trainer.checkpoint import CheckpointStore


def test_local_directory(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    exercise_checkpoint_store(str(root), lambda: [str(p) for p in root.rglob("*")])


@pytest.mark.parametrize("keep", [1, 3])
def test_keep_last_k(tmp_path: Path, keep: int) -> None:
    store = CheckpointStore(str(tmp_path), keep=keep)
    for step in range(1, 6):
        store.save(step, {"step": step})
    assert store.complete_steps() == list(range(6 - keep, 6))
