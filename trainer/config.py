"""The trainer's configuration: the command line the dispatcher writes, parsed into typed, validated records.

`python -m trainer.task --data-uri=gs://B/P/ --task=T --model=PRESET --epochs=N --batch-size=B --learning-rate=LR
--seed=S --strategy=S --precision=P [--micro-batch-size=M] [--gradient-accumulation-steps=K]
[--activation-checkpointing] [--tensor-parallel=T] [--pipeline-parallel=P]
[--label-column=label] [--checkpoint-every=STEPS] [--checkpoint-every-seconds=S]
[--progress-every-seconds=S] [--max-steps=N] [--hparam KEY=VALUE ...]`

--batch-size is the global batch: every optimizer step trains on exactly that many samples, split as
micro-batch x processes x accumulation steps (the dispatcher passes the planner's split; alone, the micro-batch is
the batch over the processes and the accumulation steps). With --tensor-parallel=T and --pipeline-parallel=P,
T x P processes hold one copy of the model and "processes" in that split is the data-parallel degree
world size / (T x P) (trainer/distributed.py Layout).
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from schemas.data_objects import DIGEST_CHARS, DataObject, decode_objects, objects_digest
from schemas.errors import SchemaError
from schemas.model_presets import GptPreset, get_preset
from schemas.trainer_flags import HPARAM_FLAGS, HPARAMS, HparamValues, unknown_key_message
from schemas.vocabulary import REQUESTED_PRECISIONS, STRATEGIES, TASKS
from trainer.distributed import Layout, layout_for
from trainer.errors import ConfigError


@dataclass(frozen=True)
class Hparams(HparamValues):
    """Knobs set with `--hparam KEY=VALUE`: the fields of schemas/trainer_flags.py's HparamValues (name, type, default
    and help live there, shared with the dispatcher's checks), with the trainer's range checks."""

    def validate(self) -> None:
        """The ranges and combinations the flag table cannot say; the reason when broken."""
        for flag in HPARAM_FLAGS:
            if flag.choices and getattr(self, flag.name) not in flag.choices:
                raise ConfigError(
                    f"--hparam {flag.name}={getattr(self, flag.name)!r}: expected one of {', '.join(flag.choices)}"
                )
        if not 0.0 <= self.val_fraction < 1.0:
            raise ConfigError(f"--hparam val_fraction={self.val_fraction}: expected 0 <= value < 1")
        for name, value in (
            ("warmup_steps", self.warmup_steps),
            ("shuffle_window", self.shuffle_window),
            ("keep_checkpoints", self.keep_checkpoints),
            ("log_every", self.log_every),
        ):
            minimum = 0 if name == "warmup_steps" else 1
            if value < minimum:
                raise ConfigError(f"--hparam {name}={value}: expected an integer >= {minimum}")
        if self.weight_decay < 0 or self.grad_clip < 0 or not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError("--hparam weight_decay and grad_clip must be >= 0 and min_lr_ratio within [0, 1]")


@dataclass(frozen=True)
class BatchSplit:
    """How one optimizer step's global batch is shared: micro_batch x processes x accumulation = global_batch."""

    global_batch: int
    processes: int
    micro_batch: int
    """Samples per process per forward/backward pass."""
    accumulation: int
    """Micro-batches per process per optimizer step (gradients synchronised on the last one only)."""

    @property
    def per_process(self) -> int:
        """Samples each process trains per optimizer step."""
        return self.micro_batch * self.accumulation

    def to_dict(self) -> dict[str, int]:
        return {
            "global_batch_size": self.global_batch,
            "processes": self.processes,
            "micro_batch_size": self.micro_batch,
            "gradient_accumulation_steps": self.accumulation,
        }


def _nearest_batches(batch: int, processes: int) -> str:
    lower = batch - batch % processes
    return " or ".join(str(b) for b in (lower, lower + processes) if b > 0)


DEFAULT_CHECKPOINT_EVERY = 1000
"""Steps between checkpoints when neither --checkpoint-every nor --checkpoint-every-seconds is given."""


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
    """The global batch: samples per optimizer step over every process (see BatchSplit)."""
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
    """Tabular label column: class labels (integers or text) for classification, a number for regression."""
    checkpoint_every: int | None = DEFAULT_CHECKPOINT_EVERY
    """Write a checkpoint every this many optimizer steps (and always on SIGTERM) when AIP_CHECKPOINT_DIR is set;
    None = not by steps (--checkpoint-every-seconds alone: the clock decides)."""
    checkpoint_every_seconds: int = 0
    """Write a checkpoint once this many seconds of training have passed since the last one (on the wall clock,
    agreed by every process at the same step); 0 = not by the clock."""
    progress_every_seconds: float = 30.0
    """How often rank 0 marks how far training got past its last checkpoint (progress.json beside the checkpoints,
    trainer/checkpoint.py ProgressMark): a stop without a checkpoint of its own is measured to within this; 0 = at
    every step."""
    max_steps: int | None = None
    """Stop after this many optimizer steps in total, even before the last epoch ends."""
    hparams: Hparams = field(default_factory=Hparams)
    """Further knobs (see Hparams)."""
    micro_batch_size: int | None = None
    """Samples per process per forward/backward pass; None = batch_size / (processes x accumulation steps)."""
    gradient_accumulation_steps: int = 1
    """Micro-batches each process accumulates before one optimizer step (no gradient sync on the others)."""
    activation_checkpointing: bool = False
    """Recompute each transformer block's activations in the backward pass (gpt-* models): less memory, about a
    third more compute."""
    data_objects: tuple[DataObject, ...] = ()
    """The dataset version's data objects (names relative to data_uri, generations, sizes): read exactly these, at
    these generations (--data-objects, from the request's dataset.objects). Empty: the files under data_uri."""
    data_digest: str = ""
    """The version's objects digest (--data-digest, the request's dataset.objects_digest); without data_objects the
    files under data_uri must have it."""
    tensor_parallel: int = 1
    """Processes that split each transformer block's matrices (gpt-* models; consecutive ranks, one machine)."""
    pipeline_parallel: int = 1
    """Pipeline stages the transformer blocks are cut into (gpt-* models); the micro-batches of a pipeline step are
    the gradient accumulation steps."""

    def layout(self, world_size: int) -> Layout:
        """How world_size processes share the model (a ConfigError when T x P does not divide world_size)."""
        return layout_for(world_size, self.tensor_parallel, self.pipeline_parallel)

    def batch_split(self, world_size: int) -> BatchSplit:
        """The global batch over the data-parallel groups of world_size processes (world_size / (T x P): the
        processes of one tensor-parallel group and pipeline share the same samples); a ConfigError saying which
        batches would split when it does not."""
        processes = self.layout(world_size).data_parallel
        batch, steps = self.batch_size, self.gradient_accumulation_steps
        if batch % processes:
            raise ConfigError(
                f"--batch-size={batch} is the global batch and must split evenly over the {processes} "
                f"processes; {_nearest_batches(batch, processes)} would"
            )
        share = batch // processes
        micro = self.micro_batch_size
        if micro is None:
            if share % steps:
                raise ConfigError(
                    f"--batch-size={batch} over {processes} processes is {share} samples each, which "
                    f"--gradient-accumulation-steps={steps} does not divide"
                )
            micro = share // steps
        if micro * processes * steps != batch:
            raise ConfigError(
                f"--micro-batch-size={micro} x {processes} processes x --gradient-accumulation-steps="
                f"{steps} = {micro * processes * steps}, not the global --batch-size={batch}; the "
                f"planner's split for this job no longer matches the processes it runs on"
            )
        return BatchSplit(global_batch=batch, processes=processes, micro_batch=micro, accumulation=steps)

    def validate(self) -> None:
        """Reject bad values and bad combinations, saying which and why."""
        if self.task not in TASKS:
            raise ConfigError(f"--task={self.task!r}: expected one of {', '.join(TASKS)}")
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"--strategy={self.strategy!r}: expected one of {', '.join(STRATEGIES)}")
        if self.precision not in REQUESTED_PRECISIONS:
            raise ConfigError(f"--precision={self.precision!r}: expected one of {', '.join(REQUESTED_PRECISIONS)}")
        for name in ("epochs", "batch_size", "gradient_accumulation_steps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')}={getattr(self, name)}: expected an integer >= 1")
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            raise ConfigError(f"--checkpoint-every={self.checkpoint_every}: expected an integer >= 1 or no flag")
        if self.checkpoint_every_seconds < 0:
            raise ConfigError(
                f"--checkpoint-every-seconds={self.checkpoint_every_seconds}: expected a whole number of seconds >= 1, "
                "or no flag"
            )
        if not 0 <= self.progress_every_seconds <= 86_400:
            raise ConfigError(
                f"--progress-every-seconds={self.progress_every_seconds}: expected seconds from 0 (every step) to "
                "86400, or no flag (30)"
            )
        if self.micro_batch_size is not None and self.micro_batch_size < 1:
            raise ConfigError(f"--micro-batch-size={self.micro_batch_size}: expected an integer >= 1 or no flag")
        if self.activation_checkpointing and self.task != "causal-lm":
            raise ConfigError(
                f"--activation-checkpointing recomputes transformer blocks; --task={self.task} trains "
                "an MLP, which has none"
            )
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError(f"--max-steps={self.max_steps}: expected an integer >= 1 or no flag")
        if not self.learning_rate > 0:
            raise ConfigError(f"--learning-rate={self.learning_rate}: expected a positive number")
        if self.data_digest and (len(self.data_digest) != DIGEST_CHARS or not self.data_digest.isalnum()):
            raise ConfigError(f"--data-digest={self.data_digest!r}: expected {DIGEST_CHARS} hex characters (SHA-256)")
        if self.data_objects and self.data_digest and objects_digest(self.data_objects) != self.data_digest:
            raise ConfigError("--data-objects does not have --data-digest: pass the pair the request carries")
        if not self.data_uri:
            raise ConfigError("--data-uri is empty: expected gs://BUCKET/PREFIX/, a /gcs/ path or a local path")
        self.hparams.validate()
        self._validate_layout()
        if self.task == "causal-lm" and self.hparams.data_format not in ("auto", "text"):
            raise ConfigError(f"--task=causal-lm reads text shards; --hparam data_format={self.hparams.data_format}")
        if self.task != "causal-lm" and self.hparams.data_format == "text":
            raise ConfigError(f"--task={self.task} reads tables (csv, parquet, jsonl), not data_format=text")

    def _validate_layout(self) -> None:
        """--tensor-parallel and --pipeline-parallel against the model (the world size is checked by layout())."""
        for flag, value in (
            ("--tensor-parallel", self.tensor_parallel),
            ("--pipeline-parallel", self.pipeline_parallel),
        ):
            if value < 1:
                raise ConfigError(f"{flag}={value}: expected an integer >= 1 (1: no splitting)")
            if value > 1 and self.task != "causal-lm":
                raise ConfigError(
                    f"{flag}={value} splits a transformer; --task={self.task} trains an MLP, which is trained "
                    f"whole: drop {flag} (or use 1)"
                )
        if self.tensor_parallel == self.pipeline_parallel == 1:
            return
        try:
            preset = get_preset(self.model)
        except SchemaError:
            return  # the model factory names the unknown preset
        if not isinstance(preset, GptPreset):
            return  # the model factory rejects a preset of the wrong family
        if preset.n_head % self.tensor_parallel:
            heads = [t for t in range(1, preset.n_head + 1) if preset.n_head % t == 0]
            raise ConfigError(
                f"--tensor-parallel={self.tensor_parallel} must divide --model={self.model}'s {preset.n_head} "
                f"attention heads (each process runs whole heads); use one of {', '.join(map(str, heads))}"
            )
        if self.pipeline_parallel > preset.n_layer:
            raise ConfigError(
                f"--pipeline-parallel={self.pipeline_parallel} stages need at least as many transformer blocks; "
                f"--model={self.model} has {preset.n_layer}: use --pipeline-parallel={preset.n_layer} or fewer"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainer.task", description="Landfall's PyTorch trainer.")
    parser.add_argument("--data-uri", required=True, help="gs://BUCKET/PREFIX/, a /gcs/ path or a local path")
    parser.add_argument("--task", required=True, choices=TASKS)
    parser.add_argument("--model", required=True, help="model preset name, e.g. mlp-small or gpt-tiny")
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument(
        "--batch-size", type=int, required=True, help="the global batch: samples per optimizer step over every process"
    )
    parser.add_argument(
        "--micro-batch-size",
        type=int,
        default=None,
        help="samples per process per forward/backward pass (default: the batch over the processes "
        "and the accumulation steps)",
    )
    parser.add_argument(
        "--gradient-accumulation-steps",
        type=int,
        default=1,
        help="micro-batches per process per optimizer step; gradients are synchronised on the last",
    )
    parser.add_argument(
        "--activation-checkpointing",
        action="store_true",
        help="recompute each transformer block in the backward pass (less memory, ~1/3 more compute)",
    )
    parser.add_argument(
        "--tensor-parallel",
        type=int,
        default=1,
        help="processes that split each transformer block's matrices (gpt-* models; default 1)",
    )
    parser.add_argument(
        "--pipeline-parallel",
        type=int,
        default=1,
        help="pipeline stages the transformer blocks are cut into (gpt-* models; default 1); the micro-batches of "
        "a pipeline step are --gradient-accumulation-steps",
    )
    parser.add_argument("--learning-rate", type=float, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--strategy", default="ddp", choices=STRATEGIES)
    parser.add_argument("--precision", default="auto", choices=REQUESTED_PRECISIONS)
    parser.add_argument("--label-column", default="label")
    parser.add_argument(
        "--data-objects",
        default="",
        help="the dataset version's objects as JSON [[name, generation, size], ...] (names relative to --data-uri): "
        "read exactly these, at these generations",
    )
    parser.add_argument(
        "--data-digest",
        default="",
        help="the dataset version's objects digest (SHA-256, schemas/data_objects.py); without --data-objects the "
        "files under --data-uri must have it",
    )
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        help="steps between checkpoints (default 1000, or none with --checkpoint-every-seconds)",
    )
    parser.add_argument(
        "--checkpoint-every-seconds",
        type=int,
        default=0,
        help="seconds of training between checkpoints, on the wall clock (the plan's interval)",
    )
    parser.add_argument(
        "--progress-every-seconds",
        type=float,
        default=30.0,
        help="how often rank 0 marks how far training got past its last checkpoint (0: every step)",
    )
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument(
        "--hparam",
        action="extend",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="; ".join(f"{f.name} ({f.kind.__name__}, default {f.default!r}): {f.help}" for f in HPARAM_FLAGS),
    )
    return parser


def parse_hparams(items: list[str]) -> Hparams:
    """KEY=VALUE strings into Hparams, each value read as its flag's type (schemas/trainer_flags.py)."""
    values: dict[str, Any] = {}  # each value is its field's type: HPARAMS[key] is built from that field
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"--hparam {item!r}: expected KEY=VALUE")
        if key not in HPARAMS:
            raise ConfigError(f"--hparam {unknown_key_message(key)}")
        try:
            values[key] = HPARAMS[key].parse(raw)
        except ValueError as exc:
            raise ConfigError(f"--hparam {key}={raw!r}: {exc}") from exc
    return Hparams(**values)


def parse_args(argv: list[str]) -> TrainConfig:
    """The command line into a validated TrainConfig; argparse exits with usage text on unknown flags."""
    ns = build_parser().parse_args(argv)
    config = TrainConfig(
        data_uri=ns.data_uri,
        task=ns.task,
        model=ns.model,
        epochs=ns.epochs,
        batch_size=ns.batch_size,
        learning_rate=ns.learning_rate,
        seed=ns.seed,
        strategy=ns.strategy,
        precision=ns.precision,
        label_column=ns.label_column,
        checkpoint_every=ns.checkpoint_every
        if ns.checkpoint_every is not None
        else (None if ns.checkpoint_every_seconds else DEFAULT_CHECKPOINT_EVERY),
        checkpoint_every_seconds=ns.checkpoint_every_seconds,
        progress_every_seconds=ns.progress_every_seconds,
        max_steps=ns.max_steps,
        hparams=parse_hparams(ns.hparam),
        micro_batch_size=ns.micro_batch_size,
        gradient_accumulation_steps=ns.gradient_accumulation_steps,
        activation_checkpointing=ns.activation_checkpointing,
        tensor_parallel=ns.tensor_parallel,
        pipeline_parallel=ns.pipeline_parallel,
        data_objects=_data_objects(ns.data_objects),
        data_digest=ns.data_digest,
    )
    config.validate()
    return config


def _data_objects(text: str) -> tuple[DataObject, ...]:
    if not text:
        return ()
    try:
        return decode_objects(text)
    except SchemaError as exc:
        raise ConfigError(str(exc)) from exc
