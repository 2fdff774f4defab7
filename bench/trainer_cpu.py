"""Trainer CPU benchmark: global samples/s (and tokens/s) with 1 and with 2 processes on one node.

    .venv/bin/python bench/trainer_cpu.py [--rows 24000] [--epochs 2]

Each figure comes from the metrics.json of a real `python -m trainer.task` run (DDP over gloo for 2 processes,
LANDFALL_NPROC_PER_NODE processes on this node): samples_per_second counts every rank's samples over the time
spent in training steps (streaming the data included; the scan pass, evaluation and checkpoints excluded).
Three setups per workload: 1 process with PyTorch's default threads (all cores), 1 process with 1 thread, and
2 processes with the launcher's default (cores / 2 threads each). On a shared, loaded machine intra-op threads
contend badly for tiny models, which the 1-thread row shows. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def run_and_measure(
    args: list[str], nproc: int | None, workdir: Path, env_extra: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run the trainer once; returns its metrics.json plus the process wall time."""
    model_dir = workdir / f"model-{time.monotonic_ns()}"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "OMP_NUM_THREADS")}
    env.update(PYTHONPATH=str(REPO), AIP_MODEL_DIR=str(model_dir), **(env_extra or {}))
    if nproc is not None:
        env["LANDFALL_NPROC_PER_NODE"] = str(nproc)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.task", *args], env=env, cwd=REPO, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"trainer failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    metrics = json.loads((model_dir / "metrics.json").read_text())
    if not isinstance(metrics, dict):
        raise SystemExit(f"{model_dir}/metrics.json: expected a JSON object, got {type(metrics).__name__}")
    metrics["process_wall_seconds"] = time.monotonic() - started
    return metrics


def write_table(root: Path, rows: int, shards: int, features: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    weights = [rng.gauss(0, 1) for _ in range(features)]
    root.mkdir(parents=True)
    header = ",".join(f"x{i}" for i in range(features)) + ",label\n"
    for s in range(shards):
        lines = [header]
        for _ in range(rows // shards):
            x = [rng.gauss(0, 1) for _ in range(features)]
            label = int(sum(w * v for w, v in zip(weights, x, strict=True)) > 0)
            lines.append(",".join(f"{v:.4f}" for v in x) + f",{label}\n")
        (root / f"part-{s:03d}.csv").write_text("".join(lines))
    return root


def write_text(root: Path, size_bytes: int, shards: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    words = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "seven", "red", "birds"]
    root.mkdir(parents=True)
    for s in range(shards):
        out, size = [], 0
        while size < size_bytes // shards:
            line = " ".join(rng.choice(words) for _ in range(rng.randint(5, 14))) + ".\n"
            out.append(line)
            size += len(line)
        (root / f"text-{s:03d}.txt").write_text("".join(out))
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16000, help="tabular rows in all (4 shards)")
    parser.add_argument("--text-bytes", type=int, default=100_000, help="text bytes in all (4 shards)")
    parser.add_argument("--epochs", type=int, default=1)
    ns = parser.parse_args()
    load = os.getloadavg()
    print(
        f"trainer CPU benchmark: {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
        "(other work on the machine lowers every figure)"
    )
    with tempfile.TemporaryDirectory(prefix="landfall-bench-") as tmp:
        work = Path(tmp)
        table = write_table(work / "table", ns.rows, shards=4, features=16)
        text = write_text(work / "text", ns.text_bytes, shards=4)
        workloads = [
            (
                "tabular mlp-medium, batch 128/process",
                [
                    f"--data-uri={table}",
                    "--task=tabular-classification",
                    "--model=mlp-medium",
                    f"--epochs={ns.epochs}",
                    "--batch-size=128",
                    "--learning-rate=0.003",
                    "--seed=1",
                    "--strategy=ddp",
                    "--precision=auto",
                ],
            ),
            (
                "causal-lm gpt-tiny, batch 16/process",
                [
                    f"--data-uri={text}",
                    "--task=causal-lm",
                    "--model=gpt-tiny",
                    f"--epochs={ns.epochs}",
                    "--batch-size=16",
                    "--learning-rate=0.003",
                    "--seed=1",
                    "--strategy=ddp",
                    "--precision=auto",
                ],
            ),
        ]
        # (processes, OMP_NUM_THREADS per process or None for the default: all cores, or cores / processes)
        setups = [(1, None), (1, "1"), (2, None)]
        print(
            f"{'workload':<38} {'procs':>5} {'threads':>8} {'samples/s':>10} {'tokens/s':>9} {'vs 1':>6} "
            f"{'steps':>5} {'loss':>7} {'wall s':>6}"
        )
        for name, args in workloads:
            base = None
            for nproc, threads in setups:
                m = run_and_measure(args, nproc, work, {"OMP_NUM_THREADS": threads} if threads else None)
                base = base or m["samples_per_second"]
                tokens = f"{m['tokens_per_second']:.0f}" if m["tokens_per_second"] else "-"
                shown = threads or str(max(1, (os.cpu_count() or 1) // nproc))
                print(
                    f"{name:<38} {nproc:>5} {shown:>8} {m['samples_per_second']:>10.1f} {tokens:>9} "
                    f"{m['samples_per_second'] / base:>5.2f}x {m['steps']:>5} {m['final']['loss']:>7.4f} "
                    f"{m['process_wall_seconds']:>6.1f}"
                )


if __name__ == "__main__":
    main()
