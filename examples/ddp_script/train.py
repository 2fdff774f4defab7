"""A torchrun-style DDP training script that knows nothing of Landfall, Vertex or Cloud Storage.

Run it with torchrun on your laptop (`torchrun --nproc-per-node=2 train.py --epochs 3` with LANDFALL_DATA_DIR,
LANDFALL_MODEL_DIR and LANDFALL_METRICS_FILE pointing at local paths), or hand it to Landfall
(`landfall submit --script train.py --data gs://BUCKET/PREFIX/`): it reads only the trainer contract's variables
(docs/trainer-contract.md): torch.distributed's (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), the data
folder (CSV files with a header; the last column is the target), the model folder, the metrics file and the
checkpoint folder with the plan's checkpoint interval.

Checkpoints: every LANDFALL_CHECKPOINT_EVERY_SECONDS of training (or LANDFALL_CHECKPOINT_EVERY_STEPS steps when only
that is set) and when a SIGTERM asks it to stop (Vertex's preemption notice), it saves the model and the optimizer
with torch.distributed.checkpoint into LANDFALL_CHECKPOINT_DIR as step-NNNNNNNNN/, commit.json written last. At start
it resumes from the newest committed one (LANDFALL_RESUME_STEP, or its own look in the folder where no launcher says
it) at whatever world size it now has: each step trains on every row, shared out among the processes, so step N means
the same at 1, 2 or 4 processes, and DDP keeps the same state on every process, which process 0 saves alone.
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import signal
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel

COMMIT = "commit.json"
warnings.filterwarnings("ignore", message="torch.distributed is disabled")  # no_dist below: process 0 saves alone


def read_rows(data_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    rows: list[list[float]] = []
    for path in sorted(data_dir.rglob("*.csv")):
        with path.open(newline="") as fh:
            reader = csv.reader(fh)
            next(reader)  # header
            rows += [[float(v) for v in row] for row in reader if row]
    if not rows:
        raise SystemExit(f"no CSV rows under {data_dir}")
    table = torch.tensor(rows, dtype=torch.float32)
    return table[:, :-1], table[:, -1:]


def resume_step(folder: Path) -> int:
    """The newest committed checkpoint's step (0: none): Landfall's launcher says it; an image looks itself."""
    if "LANDFALL_RESUME_STEP" in os.environ:
        return int(os.environ["LANDFALL_RESUME_STEP"])
    steps = [int(p.name[5:]) for p in folder.glob("step-*") if p.name[5:].isdigit() and (p / COMMIT).is_file()]
    return max(steps, default=0)


def save(folder: Path, step: int, state: dict[str, Any], world: int) -> None:
    """Process 0's checkpoint of the replicated state; commit.json last, so a half-written one is never resumed."""
    target = folder / f"step-{step:09d}"
    dcp.save(state, checkpoint_id=target, no_dist=True)
    (target / COMMIT).write_text(json.dumps({"step": step, "world_size": world}))
    print(json.dumps({"message": "checkpoint saved", "step": step, "path": str(target)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument(
        "--pause", type=float, default=0.0, help="seconds each step also waits, standing in for a bigger model's work"
    )
    args = parser.parse_args()

    stop = torch.zeros(1)
    signal.signal(signal.SIGTERM, lambda *_: stop.fill_(1))  # the processes agree on it at the next step's end
    dist.init_process_group("gloo")  # env:// : MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, as torchrun sets them
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        features, target = read_rows(Path(os.environ["LANDFALL_DATA_DIR"]))
        mine = slice(rank, None, world)  # every rank trains on its own share of the rows
        x, y = features[mine], target[mine]
        torch.manual_seed(0)
        model = DistributedDataParallel(torch.nn.Linear(x.shape[1], 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.5)
        metrics = Path(os.environ["LANDFALL_METRICS_FILE"])
        folder = Path(os.environ.get("LANDFALL_CHECKPOINT_DIR") or "checkpoints")
        every_seconds = float(os.environ.get("LANDFALL_CHECKPOINT_EVERY_SECONDS") or 0)
        planned_steps = int(os.environ.get("LANDFALL_CHECKPOINT_EVERY_STEPS") or 0)  # the same interval, in steps
        every_steps = 0 if every_seconds else planned_steps
        start = resume_step(folder)
        if start:
            model_state, optim_state = get_state_dict(model, optimizer)
            state = {"model": model_state, "optimizer": optim_state}
            dcp.load(state, checkpoint_id=folder / f"step-{start:09d}", no_dist=True)
            set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
            if rank == 0:
                with metrics.open("a") as fh:
                    fh.write(json.dumps({"resumed_from_step": start}) + "\n")
        saved_at = time.monotonic()
        for step in range(start + 1, args.epochs + 1):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            time.sleep(args.pause)
            shared = torch.cat([loss.detach().reshape(1), stop])
            dist.all_reduce(shared)  # the mean loss, and whether any process was asked to stop
            stopping = bool(shared[1] > 0)
            due = (every_seconds and time.monotonic() - saved_at >= every_seconds) or (
                every_steps and step % every_steps == 0
            )
            if rank == 0:
                with metrics.open("a") as fh:
                    line = {"step": step, "loss": shared[0].item() / world, "world_size": world}
                    fh.write(json.dumps(line | {"checkpoint_every_steps": planned_steps}) + "\n")
                if (due or stopping) and step < args.epochs:
                    model_state, optim_state = get_state_dict(model, optimizer)
                    save(folder, step, {"model": model_state, "optimizer": optim_state}, world)
            if due:
                saved_at = time.monotonic()
            if stopping and step < args.epochs:
                dist.barrier()  # process 0 has saved: all leave together (it also holds the group's store)
                raise SystemExit(143)  # stopped on request, its progress saved: the next attempt resumes it
        if rank == 0:
            model_dir = Path(os.environ["LANDFALL_MODEL_DIR"])
            model_dir.mkdir(parents=True, exist_ok=True)
            torch.save(model.module.state_dict(), model_dir / "model.pt")
        dist.barrier()
    finally:
        # Free DDP before the group: its reducer holds the group, and destroying the group from there (with the GIL
        # held) can deadlock with a gloo thread that needs the GIL to release the last collective's tensors. Freed
        # first, the group goes in destroy_process_group, which lets go of the GIL.
        model = optimizer = None
        gc.collect()  # DDP's module sits in reference cycles: collect frees its reducer now, not at some later time
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
