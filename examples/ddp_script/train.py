"""A torchrun-style DDP training script that knows nothing of Landfall, Vertex or Cloud Storage.

Run it with torchrun on your laptop (`torchrun --nproc-per-node=2 train.py --epochs 3` with LANDFALL_DATA_DIR,
LANDFALL_MODEL_DIR and LANDFALL_METRICS_FILE pointing at local paths), or hand it to Landfall
(`landfall submit --script train.py --data gs://BUCKET/PREFIX/`): it reads only the trainer contract's variables
(docs/trainer-contract.md): torch.distributed's (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), the data
folder (CSV files with a header; the last column is the target), the model folder, the metrics file and the
plan's checkpoint interval.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()

    dist.init_process_group("gloo")  # env:// : MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, as torchrun sets them
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        features, target = read_rows(Path(os.environ["LANDFALL_DATA_DIR"]))
        mine = slice(rank, None, world)  # every rank trains on its own share of the rows
        x, y = features[mine], target[mine]
        torch.manual_seed(0)
        model = DistributedDataParallel(torch.nn.Linear(x.shape[1], 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
        metrics = Path(os.environ["LANDFALL_METRICS_FILE"])
        # The plan's checkpoint interval (docs/trainer-contract.md): a script whose runs last hours saves its state
        # every that many steps; this one trains for seconds and only reports it.
        checkpoint_every = int(os.environ.get("LANDFALL_CHECKPOINT_EVERY_STEPS", "0"))
        for epoch in range(1, args.epochs + 1):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            if rank == 0:
                with metrics.open("a") as fh:
                    line = {"step": epoch, "loss": mean.item() / world, "world_size": world}
                    fh.write(json.dumps(line | {"checkpoint_every_steps": checkpoint_every}) + "\n")
        if rank == 0:
            model_dir = Path(os.environ["LANDFALL_MODEL_DIR"])
            model_dir.mkdir(parents=True, exist_ok=True)
            torch.save(model.module.state_dict(), model_dir / "model.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
