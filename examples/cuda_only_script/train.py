"""A DDP script written for GPUs only, as the PyTorch DDP tutorial's multinode.py is: nccl, one GPU per process by
LOCAL_RANK, tensors moved with `.to(local_rank)`, DDP with device_ids. It knows nothing of Landfall beyond the
contract's variables (docs/trainer-contract.md).

On Vertex it runs as written. On a machine without CUDA it stops at init_process_group ("Distributed package doesn't
have NCCL built in"); `LANDFALL_CPU_REHEARSAL=1 landfall up` runs it on the local stack unchanged, on the CPU
(trainer/cpu_rehearsal/sitecustomize.py).
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def read_rows(data_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    rows: list[list[float]] = []
    for path in sorted(data_dir.rglob("*.csv")):
        with path.open(newline="") as fh:
            reader = csv.reader(fh)
            next(reader)  # header
            rows += [[float(v) for v in row] for row in reader if row]
    table = torch.tensor(rows, dtype=torch.float32)
    return table[:, :-1], table[:, -1:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group(backend="nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    rank, world = dist.get_rank(), dist.get_world_size()
    features, target = read_rows(Path(os.environ["LANDFALL_DATA_DIR"]))
    x, y = features[rank::world].to(local_rank), target[rank::world].to(local_rank)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(x.shape[1], 1).to(local_rank), device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for epoch in range(1, args.epochs + 1):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        torch.cuda.synchronize()
        if rank == 0:
            with Path(os.environ["LANDFALL_METRICS_FILE"]).open("a") as fh:
                fh.write(json.dumps({"step": epoch, "loss": mean.item() / world, "device": str(x.device)}) + "\n")
    if rank == 0:
        model_dir = Path(os.environ["LANDFALL_MODEL_DIR"])
        model_dir.mkdir(parents=True, exist_ok=True)
        torch.save(model.module.state_dict(), model_dir / "model.pt")
        restored = torch.load(model_dir / "model.pt", map_location=f"cuda:{local_rank}")
        assert set(restored) == {"weight", "bias"}
    dist.barrier()
    model = optimizer = None  # DDP freed before its group (docs/decisions/free-ddp-before-its-process-group.md)
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
