"""One process of the model-parallel layout tests (test_layouts.py).

    python -m tests.integration.trainer.layouts_worker --tensor-parallel 2 --steps 4 --out DIR
    python -m tests.integration.trainer.layouts_worker --steps 4 --save-at 2 --checkpoints CK --out DIR
    python -m tests.integration.trainer.layouts_worker --steps 4 --resume --checkpoints CK --out DIR

Run torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT set). The model is gpt-tiny built from a
fixed seed, split and wrapped by the trainer itself (trainer/distributed.py device_mesh, trainer/parallel.py wrap)
for --tensor-parallel x --pipeline-parallel (the rest of the processes are data parallel), trained with the
trainer's AdamW, gradient clipping and train_step (trainer/loop.py). Every layout draws the same global batches
from a fixed seed; each process trains its data shard's contiguous share of each (its dp coordinate's).

--save-at K writes a checkpoint after step K through the trainer's store and state-dict code (and stops there);
--resume reads the newest checkpoint (whatever layout wrote it, upgraded from an earlier format where its commit
record says so: trainer/loop.py load_state) and trains on to --steps. Rank 0 writes result.json (the global mean
loss of each step this process trained, the layout, the batch split) and weights.pt (the whole model at the end,
gathered from every process); with --optimizer also optimizer.pt (the whole AdamW state, keyed by parameter name).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

from tests.checkpoint_contract import record
from trainer import collectives
from trainer.checkpoint import CheckpointStore
from trainer.config import Hparams, TrainConfig
from trainer.distributed import DistEnv, device_mesh, process_group, read_process_env
from trainer.loop import Session, data_rank, load_state, train_step
from trainer.models.factory import build_model
from trainer.parallel import full_state, model_weights, sharded_state, wrap
from trainer.precision import resolve_precision

SEQ = 64  # gpt-tiny's sequence length
LEARNING_RATE = 3e-3


def session(config: TrainConfig, env: DistEnv, device: str) -> Session:
    torch.manual_seed(config.seed)  # the same initial weights in every process and every layout
    model = build_model(config.model, config.task, {}, config.activation_checkpointing)
    layout = config.layout(env.world_size)
    mesh = device_mesh(layout, device) if layout.model_parallel else None
    split = config.batch_split(env.world_size)
    wrapped = wrap(
        model, config.strategy, device, config.learning_rate, 0.1, mesh=mesh, micro_batches=split.accumulation
    )
    precision = resolve_precision("fp32", cuda=False, bf16_supported=False)
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
        scheduler=torch.optim.lr_scheduler.LambdaLR(wrapped.optimizer, lambda _: 1.0),
        scaler=precision.grad_scaler(),
        store=None,
        events=None,  # type: ignore[arg-type]
        data_spec={},
        evaluation=None,  # type: ignore[arg-type]
    )


def batches(s: Session, steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """This process's share of each step's global batch (the same global batches in every layout)."""
    split = s.config.batch_split(s.env.world_size)
    generator = torch.Generator().manual_seed(1234)
    shares = []
    shard = data_rank(s)
    for _ in range(steps):
        tokens = torch.randint(0, 256, (split.global_batch, SEQ + 1), generator=generator)
        share = tokens[shard * split.per_process : (shard + 1) * split.per_process]
        shares.append((share[:, :-1], share[:, 1:]))
    return shares


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tensor-parallel", type=int, default=1)
    parser.add_argument("--pipeline-parallel", type=int, default=1)
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--accumulation", type=int, default=1)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--save-at", type=int, default=None)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--checkpoints", default=None)
    parser.add_argument("--optimizer", action="store_true", help="also write optimizer.pt (the whole AdamW state)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    env = read_process_env(os.environ)
    config = TrainConfig(
        data_uri="(in memory)",
        task="causal-lm",
        model="gpt-tiny",
        epochs=1,
        batch_size=args.batch,
        learning_rate=LEARNING_RATE,
        seed=7,
        strategy=args.strategy,
        precision="fp32",
        hparams=Hparams(grad_clip=1.0),
        gradient_accumulation_steps=args.accumulation,
        tensor_parallel=args.tensor_parallel,
        pipeline_parallel=args.pipeline_parallel,
    )
    config.validate()
    store = CheckpointStore(args.checkpoints, keep=2) if args.checkpoints else None
    with process_group(env) as device:
        s = session(config, env, device)
        first = 0
        if args.resume:
            assert store is not None
            step = store.latest()
            assert step is not None, "no checkpoint to resume"
            load_state(s, store, step, store.record(step))
            first = step
        last = args.save_at if args.save_at is not None else args.steps
        losses = []
        for x, y in batches(s, last)[first:]:
            scores = collectives.all_reduce(train_step(s, x, y), s.device)
            losses.append(float(scores[0] / scores[2]))
        if args.save_at is not None:
            assert store is not None
            store.save(args.save_at, sharded_state(s.wrapped), record(args.save_at), {})
        weights = model_weights(s.wrapped)
        optimizer = full_state(s.wrapped)[1] if args.optimizer else None
        if env.is_main:
            args.out.mkdir(parents=True, exist_ok=True)
            split = config.batch_split(env.world_size).to_dict()
            layout = config.layout(env.world_size).to_dict()
            document = {"losses": losses, "first_step": first, "split": split, "layout": layout}
            (args.out / "result.json").write_text(json.dumps(document))
            torch.save(weights, args.out / "weights.pt")
            if optimizer is not None:
                torch.save(optimizer, args.out / "optimizer.pt")
        collectives.barrier()


if __name__ == "__main__":
    main()
