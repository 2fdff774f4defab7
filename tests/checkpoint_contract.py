"""The checkpoint store's contract, exercised on a local directory (tests/unit/trainer/) and on fake-gcs-server
(tests/integration/trainer/): a checkpoint without its commit record is never loaded; the newest committed one
wins; k are kept; what was saved reads back."""

from __future__ import annotations

from typing import Any

import torch

from trainer import storage
from trainer.checkpoint import CheckpointStore, CommitRecord


def record(step: int) -> CommitRecord:
    return CommitRecord(
        step=step,
        epoch=0,
        batch_in_epoch=step,
        samples_in_epoch=step * 8,
        samples_seen=step * 8,
        seed=1,
        world_size=1,
        strategy="ddp",
        written_at=0.0,
        config={"seed": 1},
        data_spec={},
        epochs=[],
        early_stopping={},
        best_weights=False,
    )


def save(store: CheckpointStore, step: int) -> None:
    shards: dict[str, Any] = {"model": {"w": torch.full((3,), float(step))}}
    store.save(step, shards, record(step), {"scheduler": {"last_epoch": step}})


def exercise_checkpoint_store(root: str, listing) -> None:
    store = CheckpointStore(root, keep=2)
    assert store.latest() is None
    for step in (10, 20, 30):
        save(store, step)
    assert store.complete_steps() == [20, 30]  # the oldest was pruned
    template: dict[str, Any] = {"model": {"w": torch.zeros(3)}}
    store.load_shards(30, template)
    assert torch.equal(template["model"]["w"], torch.full((3,), 30.0))
    assert store.record(30) == record(30)
    assert store.resume_state(30) == {"scheduler": {"last_epoch": 30}}
    # A writer that died before its commit record leaves shards alone: they must be ignored, not loaded.
    storage.write_bytes(storage.join(store.root, "step-000000040/__0_0.distcp"), b"half a checkpoint")
    storage.write_bytes(storage.join(store.root, "step-000000040/.metadata"), b"half an index")
    assert store.latest() == 30
    assert any("step-000000040/__0_0.distcp" in name for name in listing())
    save(store, 50)
    assert store.complete_steps() == [30, 50]
    assert not any("step-000000040" in name for name in listing())  # abandoned partial is cleaned up
