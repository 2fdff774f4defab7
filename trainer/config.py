"""The trainer's configuration: the command line the dispatcher writes, parsed into typed, validated records.

`python -m trainer.task --data-uri=gs://B/P/ --task=T --model=PRESET --epochs=N --batch-size=B --learning-rate=LR
--seed=S --strategy=S --precision=P [--label-column=label] [--checkpoint-every=STEPS] [--max-steps=N]
[--hparam KEY=VALUE ...]`
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from schemas.vocabulary import REQUESTED_PRECISIONS, STRATEGIES, TASKS
from trainer.errors import ConfigError

DATA_FORMATS = ("auto", "csv", "parquet", "jsonl", "text")


@dataclass(frozen=True)
class Hparams:
    """Knobs set with `--hparam KEY=VALUE`; every key must be one of these fields."""

    weight_decay: float = 0.0
    """AdamW weight decay."""
    warmup_steps: int = 0
    """Linear learning-rate warm-up from 0 over this many optimizer steps."""
    lr_schedule: str = "cosine"
    """'cosine' (decay to min_lr_ratio x learning rate at the last step) or 'constant'."""
    min_lr_ratio: float = 0.1
    """Floor of the cosine schedule as a fraction of the learning rate."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this value; 0 disables clipping."""
    val_fraction: float = 0.1
    """Share of rows (tabular) or lines (text) held out for evaluation, chosen by a hash of their position."""
    shuffle_window: int = 4096
    """Samples permuted together; the order is a function of the seed and the epoch only."""
    keep_checkpoints: int = 3
    """How many complete checkpoints to keep in AIP_CHECKPOINT_DIR; older ones are deleted."""
    log_every: int = 50
    """Log a progress record every this many steps (rank 0)."""
    data_format: str = "auto"
    """'auto' picks by file extension (.csv, .parquet, .jsonl/.json, .txt/.text); or force one of csv, parquet,
    jsonl, text."""

    def validate(self) -> None:
        if self.lr_schedule not in ("cosine", "constant"):
            raise ConfigError(f"--hparam lr_schedule={self.lr_schedule!r}: expected 'cosine' or 'constant'")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ConfigError(f"--hparam val_fraction={self.val_fraction}: expected 0 <= value < 1")
        if self.data_format not in DATA_FORMATS:
            raise ConfigError(f"--hparam data_format={self.data_format!r}: expected one of {', '.join(DATA_FORMATS)}")
        for name in ("warmup_steps", "shuffle_window", "keep_checkpoints", "log_every"):
            minimum = 0 if name == "warmup_steps" else 1
            if getattr(self, name) < minimum:
                raise ConfigError(f"--hparam {name}={getattr(self, name)}: expected an integer >= {minimum}")
        if self.weight_decay < 0 or self.grad_clip < 0 or not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError("--hparam weight_decay and grad_clip must be >= 0 and min_lr_ratio within [0, 1]")


@dataclass(frozen=True)
class TrainConfig:
    """Everything one training run needs besides the environment; saved into checkpoints and the model dir."""

    data_uri: str
    """gs://BUCKET/PREFIX/ (or a /gcs/ path, a local directory or one file) holding the training shards."""
    task: str
    """One of vocabulary.TASKS."""
    model: str
    """A preset name from schemas/data/model_presets.json (mlp-* for tabular tasks, gpt-* for causal-lm)."""
    epochs: int
    """Passes over the training split."""
    batch_size: int
    """Samples per process per optimizer step (the global batch is batch_size x world size)."""
    learning_rate: float
    """Peak AdamW learning rate."""
    seed: int
    """Seeds model initialisation and the data order; the same seed gives the same run."""
    strategy: str = "ddp"
    """One of vocabulary.STRATEGIES: ddp, zero1 (DDP + ZeroRedundancyOptimizer), zero2 (FSDP SHARD_GRAD_OP) or fsdp
    (FSDP FULL_SHARD)."""
    precision: str = "auto"
    """auto (bf16 where the GPU supports it, fp16 on older GPUs, fp32 on CPU), bf16, fp16 or fp32."""
    label_column: str = "label"
    """Tabular label column; integer class ids for classification, a number for regression."""
    checkpoint_every: int = 1000
    """Write a checkpoint every this many optimizer steps (and always on SIGTERM) when AIP_CHECKPOINT_DIR is set."""
    max_steps: int | None = None
    """Stop after this many optimizer steps in total, even before the last epoch ends."""
    hparams: Hparams = field(default_factory=Hparams)
    """Further knobs (see Hparams)."""

    def validate(self) -> None:
        """Reject bad values and bad combinations, saying which and why."""
        if self.task not in TASKS:
            raise ConfigError(f"--task={self.task!r}: expected one of {', '.join(TASKS)}")
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"--strategy={self.strategy!r}: expected one of {', '.join(STRATEGIES)}")
        if self.precision not in REQUESTED_PRECISIONS:
            raise ConfigError(f"--precision={self.precision!r}: expected one of {', '.join(REQUESTED_PRECISIONS)}")
        for name in ("epochs", "batch_size", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')}={getattr(self, name)}: expected an integer >= 1")
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError(f"--max-steps={self.max_steps}: expected an integer >= 1 or no flag")
        if not self.learning_rate > 0:
            raise ConfigError(f"--learning-rate={self.learning_rate}: expected a positive number")
        if not self.data_uri:
            raise ConfigError("--data-uri is empty: expected gs://BUCKET/PREFIX/, a /gcs/ path or a local path")
        self.hparams.validate()
        if self.task == "causal-lm" and self.hparams.data_format not in ("auto", "text"):
            raise ConfigError(f"--task=causal-lm reads text shards; --hparam data_format={self.hparams.data_format}")
        if self.task != "causal-lm" and self.hparams.data_format == "text":
            raise ConfigError(f"--task={self.task} reads tables (csv, parquet, jsonl), not data_format=text")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainer.task", description="Landfall's PyTorch trainer.")
    parser.add_argument("--data-uri", required=True, help="gs://BUCKET/PREFIX/, a /gcs/ path or a local path")
    parser.add_argument("--task", required=True, choices=TASKS)
    parser.add_argument("--model", required=True, help="model preset name, e.g. mlp-small or gpt-tiny")
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--batch-size", type=int, required=True, help="samples per process per step")
    parser.add_argument("--learning-rate", type=float, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--strategy", default="ddp", choices=STRATEGIES)
    parser.add_argument("--precision", default="auto", choices=REQUESTED_PRECISIONS)
    parser.add_argument("--label-column", default="label")
    parser.add_argument("--checkpoint-every", type=int, default=1000, help="steps between checkpoints")
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--hparam", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                        help=f"one of: {', '.join(f.name for f in dataclasses.fields(Hparams))}")
    return parser


def parse_hparams(items: list[str]) -> Hparams:
    """KEY=VALUE strings into Hparams, converting each value to its field's type."""
    fields = {f.name: f for f in dataclasses.fields(Hparams)}
    values: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"--hparam {item!r}: expected KEY=VALUE")
        if key not in fields:
            raise ConfigError(f"--hparam {key!r} is unknown; known keys: {', '.join(fields)}")
        kind = {"int": int, "float": float, "str": str}[str(fields[key].type)]
        try:
            values[key] = kind(raw)
        except ValueError as exc:
            raise ConfigError(f"--hparam {key}={raw!r}: expected a {kind.__name__}") from exc
    return Hparams(**values)


def parse_args(argv: list[str]) -> TrainConfig:
    """The command line into a validated TrainConfig; argparse exits with usage text on unknown flags."""
    ns = build_parser().parse_args(argv)
    config = TrainConfig(
        data_uri=ns.data_uri, task=ns.task, model=ns.model, epochs=ns.epochs, batch_size=ns.batch_size,
        learning_rate=ns.learning_rate, seed=ns.seed, strategy=ns.strategy, precision=ns.precision,
        label_column=ns.label_column, checkpoint_every=ns.checkpoint_every, max_steps=ns.max_steps,
        hparams=parse_hparams(ns.hparam),
    )
    config.validate()
    return config
