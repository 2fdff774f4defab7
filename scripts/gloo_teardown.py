"""Does leaving a gloo process group in a given order ever hang a process? Runs and counts it.

    .venv/bin/python scripts/gloo_teardown.py [--order ddp-last|ddp-first|group-held] [--runs 3] [--rounds 100]

Each run starts --world processes on this machine; each process, --rounds times over, joins a fresh gloo group,
trains a DDP-wrapped linear layer for three steps, passes a barrier and leaves the group in the chosen order:

- ddp-last: `destroy_process_group()`, then the DDP model is freed (what a script does that lets the model go when
  its function returns). The model's reducer then holds the group's last reference and destroys it with the GIL held.
- ddp-first: the model is freed (and collected), then `destroy_process_group()` (examples/ddp_script/train.py).
- group-held: the group's Python handle is kept past the model, then `destroy_process_group()`
  (trainer/distributed.py process_group).

A run in which some process makes no progress for --stall seconds hung: it waits forever (with ddp-last, in
~ProcessGroupGloo joining a gloo worker that waits for the GIL; `gdb -p PID -batch -ex "thread apply all bt"` shows
it). The race needs a busy machine to show: run it beside other work (the test suite, or a few busy loops).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ORDERS = ("ddp-last", "ddp-first", "group-held")


def _process(order: str, rounds: int, base_port: int) -> None:
    """One process of a run: the rounds in the chosen order."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    progress = Path(os.environ["GLOO_TEARDOWN_PROGRESS"]) / str(rank)
    held = []
    for round_ in range(rounds):
        progress.write_text(str(round_))
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{base_port + round_}",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=60),
        )
        model = DistributedDataParallel(torch.nn.Linear(3, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        rows = torch.randn(20, 3)
        for _ in range(3):
            optimizer.zero_grad()
            model(rows).sum().backward()
            optimizer.step()
            dist.all_reduce(torch.ones(2))
        dist.barrier()
        if order == "ddp-first":
            model = optimizer = None  # type: ignore[assignment]
            gc.collect()
        elif order == "group-held":
            held.append(dist.group.WORLD)
        dist.destroy_process_group()
        model = optimizer = None  # type: ignore[assignment]
        gc.collect()


def _run(order: str, world: int, rounds: int, base_port: int, stall: float) -> tuple[bool, float]:
    """One run of `world` processes; (whether every process ended, seconds)."""
    started = time.monotonic()
    folder = Path(tempfile.mkdtemp(prefix="gloo-teardown-"))
    command = [sys.executable, __file__, "--process", "--order", order, "--rounds", str(rounds)]
    command += ["--port", str(base_port)]
    procs = [
        subprocess.Popen(
            command,
            env={**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "OMP_NUM_THREADS": "1"}
            | {"GLOO_TEARDOWN_PROGRESS": str(folder)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for rank in range(world)
    ]
    while (alive := [rank for rank, p in enumerate(procs) if p.poll() is None]) and (
        time.time() - _last_progress(folder, alive, started) < stall
    ):
        time.sleep(0.2)
    hung = [p for p in procs if p.poll() is None]
    for p in hung:
        p.kill()
        p.wait()
    shutil.rmtree(folder, ignore_errors=True)
    return not hung, time.monotonic() - started


def _last_progress(folder: Path, ranks: list[int], started: float) -> float:
    """When the slowest of these processes last began a round (wall clock); the run's start before each has."""
    stamps = [(folder / str(rank)).stat().st_mtime for rank in ranks if (folder / str(rank)).exists()]
    if len(stamps) < len(ranks):
        return time.time() - (time.monotonic() - started)
    return min(stamps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--order", choices=ORDERS, default="ddp-last")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--stall", type=float, default=60.0, help="seconds without a round begun that count as hung")
    parser.add_argument("--port", type=int, default=24000, help="first TCP port; each run uses --rounds from there")
    parser.add_argument("--process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.process:
        _process(args.order, args.rounds, args.port)
        return 0
    hangs = 0
    for run in range(args.runs):
        ended, seconds = _run(args.order, args.world, args.rounds, args.port + run * args.rounds, args.stall)
        hangs += not ended
        print(f"{args.order} run {run}: {'ended' if ended else 'HUNG'} after {seconds:.1f} s", flush=True)
    print(f"{args.order}: {hangs} of {args.runs} runs hung ({args.rounds} rounds of {args.world} processes each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
