"""A tiny job module the emulator tests run as a replica (`python -m tests.integration.vertex_emulator.probe_job`).

It records what a replica sees, then behaves as asked:

    --out DIR          write DIR/<replica>.json with the Vertex environment it got and the names of every variable
                       it has (and, with --processes,
                       DIR/<replica>-<local rank>.json from each local process it starts)
    --exit N           exit with status N (default 0)
    --sleep S          sleep S seconds first
    --processes        start LANDFALL_NPROC_PER_NODE local processes like the trainer does, each recording
                       its global rank (RANK x nproc + local rank) and global world size (WORLD_SIZE x nproc)
    --spawn-child      start a child process in a session of its own (as torchrun's workers are) that sleeps for a
                       long time (to test that cancel stops it)
    --exit-replica R   exit with --exit only in replica R (e.g. workerpool1-0); others exit 0 after --sleep
    --await-records N  before exiting, wait (up to 60 s) until N local-process records exist in DIR, the way a
                       trainer's primary waits for its peers in a collective
    --await-replica R  before exiting, wait (up to 60 s) until DIR/R.json exists (repeatable): a worker that fails
                       once the primary has started, or a primary that ends once its workers have, whatever the load
    --count-starts     append one line to DIR/<replica>.starts on each start and keep each start's record as
                       DIR/<replica>.start<N>.json (spot restart tests)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

VERTEX_VARIABLES = (
    "CLUSTER_SPEC",
    "TF_CONFIG",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "AIP_MODEL_DIR",
    "AIP_CHECKPOINT_DIR",
    "AIP_TENSORBOARD_LOG_DIR",
    "CLOUD_ML_JOB_ID",
    "CLOUD_ML_PROJECT_ID",
    "LANDFALL_NPROC_PER_NODE",
    "PROBE_EXTRA",
)


def replica_name() -> str:
    task = json.loads(os.environ["CLUSTER_SPEC"])["task"]
    return f"{task['type']}-{task['index']}"


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def local_process(out: Path, local_rank: int) -> None:
    nproc = int(os.environ["LANDFALL_NPROC_PER_NODE"])
    record = {
        "replica": replica_name(),
        "local_rank": local_rank,
        "global_rank": int(os.environ["RANK"]) * nproc + local_rank,
        "world_size": int(os.environ["WORLD_SIZE"]) * nproc,
        "master": f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
    }
    write_json(out / f"{replica_name()}-{local_rank}.json", record)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--exit", type=int, default=0)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--processes", action="store_true")
    parser.add_argument("--spawn-child", action="store_true")
    parser.add_argument("--exit-replica")
    parser.add_argument("--count-starts", action="store_true")
    parser.add_argument("--await-replica", action="append", default=[])
    parser.add_argument("--await-records", type=int, default=0)
    parser.add_argument("--local-rank", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.local_rank is not None:
        local_process(args.out, args.local_rank)
        return 0
    name = replica_name()
    args.out.mkdir(parents=True, exist_ok=True)
    start_number = 0
    if args.count_starts:
        with open(args.out / f"{name}.starts", "a") as starts:
            starts.write(f"{os.getpid()}\n")
        start_number = len((args.out / f"{name}.starts").read_text().split())
    record: dict[str, object] = {key: os.environ.get(key) for key in VERTEX_VARIABLES}
    record["environment"] = sorted(os.environ)
    record["argv"] = sys.argv[1:]
    record["cwd"] = os.getcwd()
    record["pid"] = os.getpid()
    if args.spawn_child:
        # in a session of its own, as torchrun starts its workers: out of the replica's process group
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        record["child_pid"] = child.pid
    if args.processes:
        nproc = int(os.environ["LANDFALL_NPROC_PER_NODE"])
        children = [
            subprocess.Popen([sys.executable, "-m", __spec__.name, "--out", str(args.out), "--local-rank", str(rank)])
            for rank in range(nproc)
        ]
        if any(child.wait() != 0 for child in children):
            return 1
    write_json(args.out / f"{name}.json", record)
    if start_number:
        write_json(args.out / f"{name}.start{start_number}.json", record)
    print(f"probe {name} started", flush=True)
    print(f"probe {name} stderr line", file=sys.stderr, flush=True)
    time.sleep(args.sleep)
    deadline = time.monotonic() + 60
    while len(list(args.out.glob("workerpool*-*-*.json"))) < args.await_records and time.monotonic() < deadline:
        time.sleep(0.05)
    while any(not (args.out / f"{r}.json").exists() for r in args.await_replica) and time.monotonic() < deadline:
        time.sleep(0.05)
    if args.exit_replica is None or args.exit_replica == name:
        return int(args.exit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
