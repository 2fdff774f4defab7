"""Trainer GPU benchmark: tokens/s and MFU of the gpt-124m preset in bf16, with DDP and with FSDP.

    .venv/bin/python bench/trainer_gpu.py [--model gpt-124m] [--batch-size 8] [--steps 60] [--precision bf16]

Runs `python -m trainer.task` on every GPU of this machine (one process per GPU, the trainer's default) for
--steps optimizer steps of byte-level causal LM on generated text, once per strategy, and prints the figures from
each run's metrics.json: tokens_per_second (all GPUs) and mfu (PaLM's model FLOPs over the datasheet peak in
schemas/data/gpus.json). The first steps (CUDA context, allocator warm-up) are included, so short
runs read low. Without a CUDA GPU it says so and exits 0. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.trainer_cpu import run_and_measure, write_text  # the sibling benchmark's helpers
from schemas.vocabulary import REQUESTED_PRECISIONS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt-124m")
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per GPU per step")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--precision", default="bf16", choices=REQUESTED_PRECISIONS)
    parser.add_argument("--strategies", default="ddp,fsdp")
    ns = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        print(
            "trainer GPU benchmark: no CUDA GPU on this machine; not run (needs a GPU: tokens/s and MFU of "
            f"{ns.model} in {ns.precision}, strategies {ns.strategies})"
        )
        return
    from schemas.model_presets import get_preset

    preset = get_preset(ns.model)
    gpus = torch.cuda.device_count()
    name = torch.cuda.get_device_name(0)
    seq = getattr(preset, "seq_len", 1024)
    needed = (seq + 1) * ns.batch_size * gpus * (ns.steps + 2)
    print(
        f"trainer GPU benchmark: {gpus} x {name}, {ns.model}, {ns.precision}, batch {ns.batch_size}/GPU, "
        f"{ns.steps} steps"
    )
    with tempfile.TemporaryDirectory(prefix="landfall-gpu-bench-") as tmp:
        work = Path(tmp)
        text = write_text(work / "text", int(needed * 1.2), shards=max(4, gpus))
        print(f"{'strategy':<9} {'tokens/s':>12} {'samples/s':>10} {'MFU':>7} {'steps':>6} {'loss':>7} {'wall s':>7}")
        for strategy in ns.strategies.split(","):
            args = [
                f"--data-uri={text}",
                "--task=causal-lm",
                f"--model={ns.model}",
                "--epochs=1",
                f"--batch-size={ns.batch_size}",
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
            m = run_and_measure(args, None, work)
            mfu = f"{100 * m['mfu']:.1f}%" if m["mfu"] is not None else "-"
            print(
                f"{strategy:<9} {m['tokens_per_second']:>12.0f} {m['samples_per_second']:>10.2f} {mfu:>7} "
                f"{m['steps']:>6} {m['final']['loss']:>7.3f} {m['process_wall_seconds']:>7.1f}"
            )


if __name__ == "__main__":
    main()
