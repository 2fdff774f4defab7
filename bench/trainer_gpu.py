"""Trainer GPU benchmark: tokens/s, MFU, peak memory and compile time per strategy and micro-batch, warm-up apart.

    .venv/bin/python bench/trainer_gpu.py [--model gpt-124m] [--batch-size 8[,16,...]] [--steps 60]
        [--precision bf16] [--strategies ddp,fsdp] [--compile auto|on|off] [--points-out FILE]
    .venv/bin/python bench/trainer_gpu.py --device cpu        (gpt-tiny, fp32, 12 steps, micro-batches 4,8)

Runs `python -m trainer.task` on every GPU of this machine (one process per GPU, the trainer's default), or in one
process on the CPU with --device cpu, for --steps optimizer steps of byte-level causal LM on generated text, once
per strategy and micro-batch (--batch-size: sequences per process per step, no accumulation). For each run it
prints two rows from its metrics.json: the warm-up (the trainer's first steps: compilation, allocator and caches)
and the steady state (the rest), each with tokens/s (all processes), MFU against the datasheet peak
(schemas/data/gpus.json; none on a CPU) and MFU against the matmul peak measured on this device before the runs
(the most a dense matmul reached in the run's precision: what the device really gives), the peak memory of one
process (CUDA's peak allocation; the peak resident memory on a CPU) and the compile time (torch.compile per block,
LANDFALL_COMPILE: auto compiles on CUDA only). FLOPs per sample are the planner's count (PaLM's 6N + 12LHQT per
token). --points-out writes the steady rows as measured points in the format of schemas/data/throughput_points.json
(GPU runs only: a point names a GPU kind), to a new file to review and merge by hand; the shipped file is never
written. Without a CUDA GPU and without --device cpu it says so and exits 0. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.trainer_cpu import run_and_measure, write_text  # the sibling benchmark's helpers
from schemas.vocabulary import REQUESTED_PRECISIONS

REPO = Path(__file__).resolve().parents[1]
SHIPPED_POINTS = REPO / "schemas" / "data" / "throughput_points.json"
CPU_DEFAULTS = {"model": "gpt-tiny", "batch_size": "4,8", "steps": 12, "precision": "fp32", "strategies": "ddp"}
GPU_DEFAULTS = {"model": "gpt-124m", "batch_size": "8", "steps": 60, "precision": "bf16", "strategies": "ddp,fsdp"}


def matmul_peak(device: str, precision: str, size: int, repeats: int = 10) -> float:
    """FLOP/s of the fastest of `repeats` timed size x size matmuls on device in the precision (after a warm-up)."""
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)

    for _ in range(3):
        a @ b
    sync()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        a @ b
        sync()
        best = min(best, time.perf_counter() - started)
    return 2.0 * size**3 / best


def phase_rows(
    metrics: dict[str, Any],
    flops_per_sample: float,
    seq_len: int,
    processes: int,
    datasheet_peak: float | None,
    measured_peak: float,
) -> list[dict[str, Any]]:
    """The warm-up and the steady rows of one run's metrics.json (one row for the whole run when it had no steady
    steps): samples/s and tokens/s of all processes, MFU against each peak (per process x processes)."""
    global_batch = int(metrics["batch"]["global_batch_size"])
    warmup = metrics.get("warmup")
    if warmup:
        phases = [
            ("warm-up", int(warmup["steps"]), int(warmup["steps"]) * global_batch, float(warmup["seconds"])),
            (
                "steady",
                int(warmup["steady_steps"]),
                int(warmup["steady_steps"]) * global_batch,
                float(warmup["steady_seconds"]),
            ),
        ]
    else:
        steps = int(metrics["steps"])
        phases = [("whole run", steps, steps * global_batch, steps * float(metrics["step_seconds"] or 0.0))]
    rows = []
    for name, steps, samples, seconds in phases:
        rate = samples / seconds if seconds > 0 else 0.0
        achieved = rate * flops_per_sample
        rows.append(
            {
                "phase": name,
                "steps": steps,
                "samples_per_second": rate,
                "tokens_per_second": rate * seq_len,
                "mfu_datasheet": achieved / (datasheet_peak * processes) if datasheet_peak else None,
                "mfu_measured": achieved / (measured_peak * processes) if measured_peak > 0 else None,
                "peak_memory_bytes": metrics.get("peak_memory_bytes"),
                "compile_seconds": metrics.get("compile_seconds"),
                "loss": metrics["final"]["loss"],
            }
        )
    return rows


def measured_point(
    accelerator_type: str,
    processes: int,
    model: str,
    flops_per_sample: float,
    micro_batch: int,
    precision: str,
    strategy: str,
    steady: dict[str, Any],
    source: str,
) -> dict[str, Any]:
    """One steady row as a throughput_points.json point (schemas/throughput_points.py reads it)."""
    return {
        "accelerator_type": accelerator_type,
        "gpus": processes,
        "processes": processes,
        "model": model,
        "flops_per_sample": flops_per_sample,
        "micro_batch": micro_batch,
        "precision": precision,
        "strategy": strategy,
        "samples_per_second": round(float(steady["samples_per_second"]), 2),
        "reported_mfu": round(float(steady["mfu_datasheet"]), 4) if steady["mfu_datasheet"] else None,
        "source": source,
    }


def write_points(path: Path, points: list[dict[str, Any]]) -> None:
    """The points as a throughput_points.json document at path (validated by its loader first); never the shipped
    file, which is reviewed and edited by hand."""
    from schemas.throughput_points import parse_throughput_points

    if path.resolve() == SHIPPED_POINTS.resolve():
        raise SystemExit(
            f"--points-out {path}: that is the shipped {SHIPPED_POINTS.name}; write to another file and merge the "
            "points you trust by hand (with their source)"
        )
    document = {"version": 1, "points": points}
    parse_throughput_points(document)
    path.write_text(json.dumps(document, indent=2) + "\n")


def gpu_kind(device_name: str) -> str | None:
    """The gpus.json key of a torch device name (the model token, as trainer/metrics.py peak_flops matches it)."""
    import re

    from schemas.gpus import load_gpus

    tokens = set(re.findall(r"[A-Za-z0-9]+", device_name.upper()))
    return next((key for key, gpu in load_gpus().kinds.items() if gpu.model.upper() in tokens), None)


def planner_flops(model: str) -> tuple[float, int]:
    """(training FLOPs per sample as the planner counts them, tokens per sample) for a gpt-* preset."""
    from functions.planning import PlanInput
    from functions.planning.catalog import load_catalog
    from functions.planning.workload import build_workload
    from schemas.model_presets import GptPreset, get_preset

    preset = get_preset(model)
    if not isinstance(preset, GptPreset):
        raise SystemExit(f"--model={model}: expected a gpt-* preset (the benchmark trains causal LM)")
    work = build_workload(PlanInput(task="causal-lm", preset=model, dataset_bytes=10**9), load_catalog().assumptions)
    return work.flops_per_sample, preset.seq_len


def _figure(value: float | None, scale: float = 1.0, digits: int = 1, suffix: str = "") -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}{suffix}"


def _line(strategy: str, micro: int, row: dict[str, Any]) -> str:
    """One printed row, under the header main() prints."""
    return (
        f"{strategy:<8} {micro:>5} {row['phase']:<9} {row['steps']:>5} {row['tokens_per_second']:>11.0f} "
        f"{_figure(row['mfu_datasheet'], 100, 1, '%'):>9} {_figure(row['mfu_measured'], 100, 1, '%'):>7} "
        f"{_figure(row['peak_memory_bytes'], 2**-30, 2):>8} {_figure(row['compile_seconds'], 1, 1):>9} "
        f"{row['loss']:>7.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--model", help="gpt-* preset (default gpt-124m; gpt-tiny on cpu)")
    parser.add_argument(
        "--batch-size", help="micro-batches per process to run, comma-separated (default 8; 4,8 on cpu)"
    )
    parser.add_argument("--steps", type=int, help="optimizer steps per run (default 60; 12 on cpu)")
    parser.add_argument("--precision", choices=REQUESTED_PRECISIONS, help="default bf16; fp32 on cpu")
    parser.add_argument("--strategies", help="comma-separated (default ddp,fsdp; ddp on cpu)")
    parser.add_argument("--compile", default="auto", choices=("auto", "on", "off"), help="LANDFALL_COMPILE")
    parser.add_argument("--points-out", type=Path, help="write the steady rows as throughput points to this new file")
    ns = parser.parse_args()
    defaults = CPU_DEFAULTS if ns.device == "cpu" else GPU_DEFAULTS
    for key, value in defaults.items():
        if getattr(ns, key) is None:
            setattr(ns, key, value)

    import torch

    if ns.device == "cuda" and not torch.cuda.is_available():
        print(
            "trainer GPU benchmark: no CUDA GPU on this machine; not run (needs a GPU: tokens/s and MFU of "
            f"{ns.model} in {ns.precision}, strategies {ns.strategies}; --device cpu shows the same columns on a CPU)"
        )
        return
    if ns.points_out is not None and ns.device == "cpu":
        raise SystemExit("--points-out: throughput points name a GPU kind; a CPU run has none (run it on a GPU)")
    from trainer.metrics import peak_flops

    flops, seq_len = planner_flops(ns.model)
    if ns.device == "cpu":
        processes, name, datasheet, env = 1, "CPU", None, {"LANDFALL_NPROC_PER_NODE": "1"}
        measured = matmul_peak("cpu", ns.precision, 512)
    else:
        processes, name = torch.cuda.device_count(), torch.cuda.get_device_name(0)
        datasheet, env = peak_flops(name, ns.precision), {}
        measured = matmul_peak("cuda:0", ns.precision, 8192)
    env["LANDFALL_COMPILE"] = ns.compile
    micro_batches = [int(b) for b in str(ns.batch_size).split(",")]
    print(
        f"trainer benchmark: {processes} x {name}, {ns.model}, {ns.precision}, micro-batches {micro_batches}, "
        f"{ns.steps} steps, LANDFALL_COMPILE={ns.compile}; peaks per device: datasheet "
        f"{_figure(datasheet, 1e-12, 1, ' TFLOP/s')}, measured matmul {measured * 1e-12:.3f} TFLOP/s"
    )
    print(
        f"{'strategy':<8} {'micro':>5} {'phase':<9} {'steps':>5} {'tokens/s':>11} {'MFU sheet':>9} {'MFU mm':>7} "
        f"{'peak GiB':>8} {'compile s':>9} {'loss':>7}"
    )
    points = []
    with tempfile.TemporaryDirectory(prefix="landfall-gpu-bench-") as tmp:
        work = Path(tmp)
        needed = (seq_len + 1) * max(micro_batches) * processes * (ns.steps + 2)
        text = write_text(work / "text", int(needed * 1.2), shards=max(4, processes))
        for strategy in ns.strategies.split(","):
            for micro in micro_batches:
                args = [
                    f"--data-uri={text}",
                    "--task=causal-lm",
                    f"--model={ns.model}",
                    "--epochs=1",
                    f"--batch-size={micro * processes}",
                    "--learning-rate=0.0006",
                    "--seed=1",
                    f"--strategy={strategy}",
                    f"--precision={ns.precision}",
                    f"--max-steps={ns.steps}",
                    "--hparam",
                    "val_fraction=0",
                    "--hparam",
                    "warmup_steps=10",
                ]
                m = run_and_measure(args, None, work, env)
                rows = phase_rows(m, flops, seq_len, processes, datasheet, measured)
                for row in rows:
                    print(_line(strategy, micro, row))
                kind = gpu_kind(name) if ns.device == "cuda" else None
                if ns.points_out is not None and kind is not None:
                    source = f"bench/trainer_gpu.py on {processes} x {name}, {time.strftime('%Y-%m-%d')}"
                    points.append(
                        measured_point(
                            kind, processes, ns.model, flops, micro, ns.precision, strategy, rows[-1], source
                        )
                    )
    if ns.points_out is not None:
        if not points:
            raise SystemExit(f"--points-out: {name} is no GPU kind of schemas/data/gpus.json; nothing written")
        write_points(ns.points_out, points)
        print(f"wrote {len(points)} measured points to {ns.points_out}")


if __name__ == "__main__":
    main()
