"""The example container's entrypoint: torchrun on this node, one process per GPU.

Vertex AI starts a team's container once per node and sets the node's place in the job: RANK (this node),
WORLD_SIZE (nodes), MASTER_ADDR and MASTER_PORT (the primary node). This hands them to torchrun
(`torch.distributed.run`), which starts one train.py per GPU and sets each process's own RANK, WORLD_SIZE and
LOCAL_RANK, exactly as `torchrun` on a laptop would. The number of processes is the node's GPU count
(`--nproc-per-node=gpu`); on the local stack, whose nodes have no GPUs, the Vertex emulator says how many processes
stand in for them (LANDFALL_NPROC_PER_NODE).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from torch.distributed.run import main as torchrun


def script() -> str:
    """train.py beside this file (in the image: /app), else the example's source (mapped on the local stack)."""
    here = Path(__file__).resolve().parent
    beside = here / "train.py"
    return str(beside if beside.is_file() else here.parent / "ddp_script" / "train.py")


def main() -> None:
    env = os.environ
    torchrun(
        [
            f"--nnodes={env.get('WORLD_SIZE', '1')}",
            f"--node-rank={env.get('RANK', '0')}",
            f"--master-addr={env.get('MASTER_ADDR', '127.0.0.1')}",
            f"--master-port={env.get('MASTER_PORT', '29500')}",
            f"--nproc-per-node={env.get('LANDFALL_NPROC_PER_NODE', 'gpu')}",
            script(),
            *sys.argv[1:],
        ]
    )


if __name__ == "__main__":
    main()
