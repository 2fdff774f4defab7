"""The campaign's trainer: the Vertex emulator runs it for the campaign's image (LANDFALL_VERTEX_IMAGES). It trains a
tiny model for LANDFALL_CAMPAIGN_STEPS steps of LANDFALL_CAMPAIGN_TRAIN_SECONDS in all (or, at the same pace, the
--max-steps the request's hyperparameters.max_steps gives) and checkpoints for real with
Landfall's own code (trainer/checkpoint.py CheckpointStore: torch.distributed.checkpoint shards, the commit record
written last, pruning, the progress mark) in AIP_CHECKPOINT_DIR, every CHECKPOINT_EVERY steps and when SIGTERM asks it
to stop; at start it resumes from the newest committed checkpoint. So a trial's faults (a killed replica, a Spot
preemption, a stockout's fallback to another job, Vertex restarting) land on real saves and resumes.

Step k (from 1) trains the global samples [(k - 1) x BATCH, k x BATCH). It logs, as JSON lines on stdout (the
replica's log), where each attempt started (`campaign start`, with `resumed_from_step`) and each step's sample range
(`campaign step`): tests/campaign/invariants.py reads them to check that no progress was lost beyond one checkpoint
interval and that no sample was trained twice in what the final model holds. It ignores the built-in trainer's flags
and writes a metrics.json into AIP_MODEL_DIR, as the trainer does.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

CHECKPOINT_EVERY = 4
"""Steps between checkpoints: the most progress a stop without SIGTERM may lose."""
BATCH = 8
START = "campaign start"
STEP = "campaign step"


def say(message: str, **fields: Any) -> None:
    print(json.dumps({"message": message, **fields}), flush=True)


def main() -> int:
    import torch

    from trainer import storage
    from trainer.checkpoint import CheckpointStore, CommitRecord

    steps = int(os.environ.get("LANDFALL_CAMPAIGN_STEPS", "12"))
    pause = float(os.environ.get("LANDFALL_CAMPAIGN_TRAIN_SECONDS", "3")) / steps
    longer = [a.removeprefix("--max-steps=") for a in sys.argv[1:] if a.startswith("--max-steps=")]
    if longer:  # a trial that needs a long job (hyperparameters.max_steps), at the same pace
        steps = int(longer[0])
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stop.append(signum))
    store = CheckpointStore(os.environ["AIP_CHECKPOINT_DIR"], keep=3)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    start = store.latest() or 0
    if start:
        state = {"model": model.state_dict()}
        store.load_shards(start, state)
        model.load_state_dict(state["model"])
    say(START, resumed_from_step=start, steps=steps, checkpoint_every=CHECKPOINT_EVERY)
    loss: torch.Tensor | None = None  # none when the checkpoint resumed from is the last step's

    def save(step: int) -> None:
        record = CommitRecord(
            step=step,
            epoch=0,
            batch_in_epoch=step,
            samples_in_epoch=step * BATCH,
            samples_seen=step * BATCH,
            seed=0,
            world_size=1,
            strategy="ddp",
            written_at=time.time(),
            config={"campaign": True},
            data_spec={},
            epochs=[],
            early_stopping={},
            best_weights=False,
        )
        store.save(step, {"model": model.state_dict()}, record, {})

    for step in range(start + 1, steps + 1):
        first = (step - 1) * BATCH
        x = torch.arange(first, first + BATCH, dtype=torch.float32).unsqueeze(1).repeat(1, 4) / 100.0
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(pause)
        say(STEP, step=step, first_sample=first, end_sample=first + BATCH)
        if step % CHECKPOINT_EVERY == 0 or (stop and step < steps):
            save(step)
        if stop and step < steps:
            say("campaign stopped", step=step)
            return 143
    metrics = {
        "final": {"loss": None if loss is None else float(loss), "accuracy": 0.75},
        "epochs": [],
        "steps": steps,
        "resumed_from_step": start,
        "trainer": "campaign checkpointing",
    }
    storage.write_bytes(
        storage.join(os.environ["AIP_MODEL_DIR"], "metrics.json"), json.dumps(metrics).encode(), "application/json"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
