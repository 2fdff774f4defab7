"""Checkpoint store: a checkpoint without its marker is never loaded; the newest complete one wins; k are kept."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import torch

from trainer.checkpoint import CheckpointStore


def _exercise(root: str, listing) -> None:
    store = CheckpointStore(root, keep=2)
    assert store.latest() is None
    for step in (10, 20, 30):
        store.save(step, {"step": step, "w": torch.full((3,), float(step))})
    assert store.complete_steps() == [20, 30]  # the oldest was pruned
    assert torch.equal(store.load(30)["w"], torch.full((3,), 30.0))
    # A writer that died before its marker leaves state.pt alone: it must be ignored, not loaded.
    from trainer import storage

    storage.write_bytes(storage.join(store.root, "step-000000040/state.pt"), b"half a checkpoint")
    assert store.latest() == 30
    assert any("step-000000040/state.pt" in name for name in listing())
    store.save(50, {"step": 50})
    assert store.complete_steps() == [30, 50]
    assert not any("step-000000040" in name for name in listing())  # abandoned partial is cleaned up


def test_local_directory(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    _exercise(str(root), lambda: [str(p) for p in root.rglob("*")])


def test_gcs(gcs_emulator) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs

    bucket = gcs.Client(project="landfall-local", credentials=AnonymousCredentials()).create_bucket(
        f"ckpt-{uuid.uuid4().hex[:10]}")
    _exercise(f"gs://{bucket.name}/run/checkpoints/", lambda: [b.name for b in bucket.list_blobs()])


@pytest.mark.parametrize("keep", [1, 3])
def test_keep_last_k(tmp_path: Path, keep: int) -> None:
    store = CheckpointStore(str(tmp_path), keep=keep)
    for step in range(1, 6):
        store.save(step, {"step": step})
    assert store.complete_steps() == list(range(6 - keep, 6))
