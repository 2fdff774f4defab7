"""The DDP script of examples/ddp_script/train.py as a folder of code: this entry point imports its sibling module
(tabular.py) and reads a file beside it (settings.json). Hand the folder to Landfall with
`landfall submit --script examples/ddp_folder --data gs://BUCKET/PREFIX/` (main.py is the entry point unless
`--entry NAME` names another), or run it here with torchrun from this folder. It reads only the trainer contract's
variables (docs/trainer-contract.md).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from tabular import make_model, read_rows
from torch.nn.parallel import DistributedDataParallel

SETTINGS = json.loads((Path(__file__).parent / "settings.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=SETTINGS["epochs"])
    parser.add_argument("--lr", type=float, default=SETTINGS["lr"])
    args = parser.parse_args()

    dist.init_process_group("gloo")  # env:// : MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, as torchrun sets them
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        features, target = read_rows(Path(os.environ["LANDFALL_DATA_DIR"]))
        x, y = features[rank::world], target[rank::world]  # every rank trains on its own share of the rows
        model = DistributedDataParallel(make_model(x.shape[1]))
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
        metrics = Path(os.environ["LANDFALL_METRICS_FILE"])
        for epoch in range(1, args.epochs + 1):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            if rank == 0:
                with metrics.open("a") as fh:
                    fh.write(json.dumps({"step": epoch, "loss": mean.item() / world, "world_size": world}) + "\n")
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
