"""One process of the gradient-accumulation equivalence test (test_accumulation.py).

    python -m tests.integration.trainer.accumulation_worker --strategy ddp --batch 8 --accumulation 2 --out DIR

Run alone (one process, the whole global batch in one pass) or torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT set). Every process draws the same global batches from a fixed seed and trains on its
contiguous share of each, through the trainer's own train_step (trainer/loop.py) on the model the trainer builds
and wraps for the strategy (trainer/parallel.py): the micro-batches, the 1/accumulation loss scaling and the
gradient sync on the last micro-step only are the trainer's, not this file's.

The optimizer is plain SGD without clipping: AdamW's update and a clipped gradient hardly depend on the gradient's
scale, so they would hide a wrong one; SGD's update is the gradient times the learning rate. The process also trains
a second copy of the model with the whole share in one pass and counts the gradient reductions of both (DDP comm
hook calls; FSDP reduce-scatters): with accumulation there must be no more than without.

Rank 0 writes result.json (per-step global loss, sums, reduction counts) and weights.pt (initial and final).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from trainer import collectives
from trainer.config import Hparams, TrainConfig
from trainer.distributed import DistEnv, process_group, read_process_env
from trainer.loop import Session, train_step
from trainer.models.factory import build_model
from trainer.parallel import full_state, wrap
from trainer.precision import resolve_precision

SEQ = 64  # gpt-tiny's sequence length
LEARNING_RATE = 0.5


class SyncCounter:
    """Counts gradient reductions: DDP comm-hook calls (one per bucket) or FSDP reduce-scatters (one per unit)."""

    def __init__(self) -> None:
        self.count = 0

    def watch_ddp(self, model: Any) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        def hook(state, bucket):  # unannotated: DDP checks a hook's annotations against dist.GradBucket
            self.count += 1
            return allreduce_hook(state, bucket)

        model.register_comm_hook(None, hook)

    def watch_fsdp(self) -> None:
        name = "reduce_scatter_single" if hasattr(dist, "reduce_scatter_single") else "reduce_scatter_tensor"
        original = getattr(dist, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return original(*args, **kwargs)

        setattr(dist, name, counted)


def session(config: TrainConfig, env: DistEnv, device: str, counter: SyncCounter, fsdp: bool) -> Session:
    torch.manual_seed(config.seed)  # the same initial weights in every process and every run
    model = build_model(config.model, config.task, {}, config.activation_checkpointing)
    wrapped = wrap(model, config.strategy, device, config.learning_rate, 0.0)
    wrapped.optimizer = torch.optim.SGD(wrapped.model.parameters(), lr=config.learning_rate)
    if collectives.active() and not fsdp:
        counter.watch_ddp(wrapped.model)
    precision = resolve_precision("fp32", cuda=False, bf16_supported=False)
    scheduler = torch.optim.lr_scheduler.LambdaLR(wrapped.optimizer, lambda _: 1.0)
    # Only what the training step reads is real: the parts it never touches are None (hence the ignores).
    return Session(
        config=config,
        env=env,
        device=device,
        precision=precision,
        corpus=None,  # type: ignore[arg-type]
        counts=None,  # type: ignore[arg-type]
        steps_per_epoch=[0],
        total_steps=0,
        wrapped=wrapped,
        scheduler=scheduler,
        scaler=precision.grad_scaler(),
        store=None,
        events=None,  # type: ignore[arg-type]
        data_spec={},
        evaluation=None,  # type: ignore[arg-type]
    )


def train(s: Session, steps: int, counter: SyncCounter) -> tuple[list[float], list[list[float]], int]:
    """(global mean loss per step, global [loss sum, correct, items] per step, reductions) over `steps` steps."""
    split = s.config.batch_split(s.env.world_size)
    generator = torch.Generator().manual_seed(1234)
    losses, sums = [], []
    before = counter.count
    for _ in range(steps):
        tokens = torch.randint(0, 256, (split.global_batch, SEQ + 1), generator=generator)
        share = tokens[s.env.rank * split.per_process : (s.env.rank + 1) * split.per_process]
        scores = collectives.all_reduce(train_step(s, share[:, :-1], share[:, 1:]), s.device)
        losses.append(float(scores[0] / scores[2]))
        sums.append([float(v) for v in scores])
    return losses, sums, counter.count - before


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--accumulation", type=int, required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--activation-checkpointing", action="store_true")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    env = (
        read_process_env(os.environ) if os.environ.get("LOCAL_RANK") is not None else DistEnv(0, 1, 0, 1, 0, None, None)
    )
    base = TrainConfig(
        data_uri="(in memory)",
        task="causal-lm",
        model="gpt-tiny",
        epochs=1,
        batch_size=args.batch,
        learning_rate=LEARNING_RATE,
        seed=7,
        strategy=args.strategy,
        precision="fp32",
        hparams=Hparams(grad_clip=0.0),
        gradient_accumulation_steps=args.accumulation,
        activation_checkpointing=args.activation_checkpointing,
    )
    fsdp = args.strategy in ("fsdp", "zero2")
    with process_group(env) as device:
        counter = SyncCounter()
        if fsdp and collectives.active():
            counter.watch_fsdp()
        accumulated = session(base, env, device, counter, fsdp)
        initial = full_state(accumulated.wrapped)[0]
        losses, sums, syncs = train(accumulated, args.steps, counter)
        final = full_state(accumulated.wrapped)[0]
        one_pass = session(
            dataclasses.replace(base, gradient_accumulation_steps=1, activation_checkpointing=False),
            env,
            device,
            counter,
            fsdp,
        )
        _, _, syncs_one_pass = train(one_pass, args.steps, counter)
        if env.is_main:
            args.out.mkdir(parents=True, exist_ok=True)
            split = base.batch_split(env.world_size)
            (args.out / "result.json").write_text(
                json.dumps(
                    {
                        "world_size": env.world_size,
                        "split": split.to_dict(),
                        "losses": losses,
                        "sums": sums,
                        "syncs": syncs,
                        "syncs_one_pass": syncs_one_pass,
                    }
                )
            )
            torch.save({"initial": initial, "final": final}, args.out / "weights.pt")
        collectives.barrier()


if __name__ == "__main__":
    main()
