"""One process of the resharding test (test_resharding.py).

    python -m tests.integration.trainer.reshard_worker save --strategy fsdp --checkpoints DIR --out FILE
    python -m tests.integration.trainer.reshard_worker load --strategy ddp --checkpoints DIR --out FILE

Run alone or torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT set). `save` trains gpt-tiny
with the trainer's AdamW for a few steps under the strategy (trainer/parallel.py wrap, trainer/loop.py train_step)
and writes a checkpoint through the trainer's own store (trainer/checkpoint.py) and state-dict code;
`load` builds the model from another seed (other weights), reads the newest checkpoint into it. Both write the full
model and optimizer state, gathered to rank 0 and keyed by parameter name, to FILE.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch

from tests.checkpoint_contract import record
from trainer import collectives
from trainer.checkpoint import CheckpointStore
from trainer.config import Hparams, TrainConfig
from trainer.distributed import DistEnv, process_group, read_process_env
from trainer.loop import Session, train_step
from trainer.models.factory import build_model
from trainer.parallel import full_state, load_sharded_state, sharded_state, wrap
from trainer.precision import resolve_precision

SEQ = 64  # gpt-tiny's sequence length
BATCH = 4
STEPS = 3


def session(strategy: str, seed: int, env: DistEnv, device: str) -> Session:
    config = TrainConfig(
        data_uri="(in memory)",
        task="causal-lm",
        model="gpt-tiny",
        epochs=1,
        batch_size=BATCH,
        learning_rate=1e-2,
        seed=seed,
        strategy=strategy,
        precision="fp32",
        hparams=Hparams(grad_clip=0.0),
    )
    torch.manual_seed(seed)
    wrapped = wrap(build_model(config.model, config.task, {}, False), strategy, device, config.learning_rate, 0.1)
    precision = resolve_precision("fp32", cuda=False, bf16_supported=False)
    # Only what the training step reads is real: the parts it never touches are None (hence the ignores).
    return Session(
        config=config,
        env=env,
        device=device,
        precision=precision,
        corpus=None,  # type: ignore[arg-type]
        counts=None,  # type: ignore[arg-type]
        steps_per_epoch=[STEPS],
        total_steps=STEPS,
        wrapped=wrapped,
        scheduler=torch.optim.lr_scheduler.LambdaLR(wrapped.optimizer, lambda _: 1.0),
        scaler=precision.grad_scaler(),
        store=None,
        events=None,  # type: ignore[arg-type]
        data_spec={},
        evaluation=None,  # type: ignore[arg-type]
    )


def train(s: Session) -> None:
    split = s.config.batch_split(s.env.world_size)
    generator = torch.Generator().manual_seed(1234)
    for _ in range(STEPS):
        tokens = torch.randint(0, 256, (split.global_batch, SEQ + 1), generator=generator)
        share = tokens[s.env.rank * split.per_process : (s.env.rank + 1) * split.per_process]
        train_step(s, share[:, :-1], share[:, 1:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("save", "load"))
    parser.add_argument("--strategy", required=True)
    parser.add_argument("--checkpoints", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    env = (
        read_process_env(os.environ) if os.environ.get("LOCAL_RANK") is not None else DistEnv(0, 1, 0, 1, 0, None, None)
    )
    store = CheckpointStore(args.checkpoints, keep=2)
    with process_group(env) as device:
        if args.mode == "save":
            s = session(args.strategy, 7, env, device)
            train(s)
            store.save(STEPS, sharded_state(s.wrapped), record(STEPS), {})
        else:
            s = session(args.strategy, 8, env, device)
            step = store.latest()
            assert step == STEPS, f"expected the checkpoint of step {STEPS}, found {step}"
            load_sharded_state(s.wrapped, lambda state: store.load_shards(step, state))
        model, optim = full_state(s.wrapped)
        if env.is_main:
            torch.save({"model": model, "optim": optim}, args.out)
        collectives.barrier()


if __name__ == "__main__":
    main()
