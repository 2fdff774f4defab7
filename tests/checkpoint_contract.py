"""The checkpoint store's contract, exercised on a local directory (tests/unit/trainer/) and on fake-gcs-server
(tests/integration/trainer/): a checkpoint without its marker is never loaded; the newest complete one wins."""

from __future__ import annotations

import torch

from trainer.checkpoint import CheckpointStore


def exercise_checkpoint_store(root: str, listing) -> None:
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
