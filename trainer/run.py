"""One training process from start to finish: assemble the parts, resume, train, write the outputs.

Environment read here (Vertex sets these; the Vertex emulator too): AIP_MODEL_DIR (required: where model.pt,
config.json and metrics.json go), AIP_CHECKPOINT_DIR (optional: checkpoints and automatic resume),
AIP_TENSORBOARD_LOG_DIR (optional: TensorBoard event files). A failed process leaves AIP_MODEL_DIR/failure.json
(trainer/task.py, trainer/failure.py).
"""

from __future__ import annotations

import dataclasses
import json
import random
import resource
import time
from collections.abc import Mapping
from typing import Any

import torch

from schemas.model_presets import GptPreset, Preset, get_preset
from schemas.trainer_spec import CHECKPOINT_DIR_ENV
from schemas.vocabulary import FSDP_STRATEGIES
from trainer import collectives, storage
from trainer.canary import canary_mode, finish_canary
from trainer.champion import score_champion
from trainer.checkpoint import CheckpointStore
from trainer.config import TrainConfig
from trainer.datasets.factory import build_corpus
from trainer.datasets.stream import held_out_samples, steps_in_epoch
from trainer.datasets.text import TextCorpus
from trainer.distributed import DistEnv, device_mesh, process_group
from trainer.errors import ConfigError, DataError, OutOfMemory
from trainer.events import EventLog
from trainer.failure import note_step
from trainer.fault_hooks import raise_if_simulated_oom
from trainer.logs import log, set_context
from trainer.loop import WARMUP_STEPS, Session, restore, run_loop, training_rate
from trainer.metrics import (
    METRICS_FILE,
    Evaluation,
    flops_per_sample,
    metrics_document,
    model_flops_utilisation,
    peak_flops,
)
from trainer.model_io import model_config, save_model
from trainer.models.factory import build_model
from trainer.parallel import block_units, local_weights_digest, model_weights, wrap
from trainer.precision import detect_precision
from trainer.preemption import PreemptionWatch
from trainer.schedule import lr_multiplier
from trainer.sizing import EarlyStopping, held_out_fraction, held_out_warnings, planned_steps
from trainer.speed import CompileState, compile_units, resolve_speed
from trainer.vertex_env import required_model_dir

# A checkpoint resumes only a run with these settings (the world size and the strategy may differ).
_RESUME_KEYS = ("data_uri", "task", "model", "batch_size", "seed", "epochs", "max_steps")


def train(config: TrainConfig, env: DistEnv, environ: Mapping[str, str]) -> dict[str, Any] | None:
    """Run training in this process; returns metrics.json's content on rank 0 (None elsewhere)."""
    started = time.monotonic()
    model_dir = required_model_dir(environ)
    set_context(rank=env.rank, world_size=env.world_size)
    watch = PreemptionWatch()
    session: Session | None = None
    canary = canary_mode(environ)
    try:
        with process_group(env) as device:
            session = _assemble(config, env, device, environ)
            if canary is not None:  # a few steps at the planned micro-batch (trainer/canary.py)
                session.total_steps = min(session.total_steps, canary.steps)
            log(
                "training started",
                task=config.task,
                model=config.model,
                strategy=config.strategy,
                precision=session.precision.name,
                device=device,
                total_steps=session.total_steps,
                steps_per_epoch=session.steps_per_epoch[0],
                epochs=len(session.steps_per_epoch),
                early_stopping_patience=session.early.patience,
                warnings=[w.to_dict() for w in session.warnings],
                resumed_from=session.last_checkpoint_step,
                evaluation=session.evaluation.to_dict(),
            )
            try:
                raise_if_simulated_oom(config.data_uri, environ)
                run_loop(session, watch)
            except torch.cuda.OutOfMemoryError as exc:
                raise _oom(config, session, exc) from exc
            watch.drain()
            if canary is not None:
                finish_canary(session, canary, model_dir)
                return None
            return _write_outputs(session, model_dir, time.monotonic() - started, environ)
    except Exception as exc:
        if session is not None:  # the failure record (trainer/failure.py) says how far training got
            note_step(exc, session.progress.step)
        raise
    finally:
        watch.restore()


def _assemble(config: TrainConfig, env: DistEnv, device: str, environ: Mapping[str, str]) -> Session:
    precision = detect_precision(config.precision)
    corpus, data_read = build_corpus(config, env.world_size)
    log(
        "dataset version read",
        source=data_read.source,
        object_count=data_read.object_count,
        total_bytes=data_read.total_bytes,
        objects_digest=data_read.objects_digest,
    )
    # Reading every shard once can take minutes on large data: say so, so that a watcher sees what the trainer does.
    log("reading the dataset", data_uri=config.data_uri, files=len(corpus.files))
    layout = config.layout(env.world_size)
    if layout.model_parallel and precision.loss_scaling:
        raise ConfigError(
            f"--precision={config.precision} resolves to fp16 with loss scaling on this GPU, which the trainer does "
            "not run with --tensor-parallel or --pipeline-parallel (the scaler's unscaling is untested on split "
            "parameters): use a GPU with bf16 (--precision=bf16), or --precision=fp32"
        )
    counts = (
        corpus.scan(layout.data_rank(env.rank), device, reads=layout.counts_data(env.rank))
        if isinstance(corpus, TextCorpus)
        else corpus.scan(env.rank, device)
    )
    hp, tabular = config.hparams, config.task != "causal-lm"
    if tabular:  # a small table holds out more rows than val_fraction alone would (trainer/sizing.py)
        fraction = held_out_fraction(sum(counts.train) + sum(counts.val), hp.val_fraction, hp.min_held_out)
        if fraction != corpus.val_fraction:
            corpus.val_fraction = fraction
            counts = corpus.scan(env.rank, device)
    spec = corpus.spec
    data_spec: dict[str, Any] = dataclasses.asdict(spec) if dataclasses.is_dataclass(spec) else dict(spec or {})
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    split = config.batch_split(env.world_size)
    model = build_model(config.model, config.task, data_spec, config.activation_checkpointing)
    speed = resolve_speed(environ, device)
    mesh = None
    if layout.model_parallel and env.is_distributed:
        mesh = device_mesh(layout, device)
        if speed.compile:  # compiled blocks are not split by parallelize_module or cut into stages here
            speed = dataclasses.replace(speed, compile=False)
            log("compiling blocks is off under tensor or pipeline parallelism", severity="WARNING")
    if env.is_main:
        log("model layout", **layout.to_dict(), strategy=config.strategy, world_size=env.world_size)
    # compiled block by block before wrapping, so that FSDP's and DDP's hooks stay outside the compiled code
    compiled = compile_units(model, block_units(model), speed.compile_backend) if speed.compile else []
    if env.is_main:
        log("speed settings", **speed.to_dict(), compiled_units=len(compiled))
    wrapped = wrap(
        model,
        config.strategy,
        device,
        config.learning_rate,
        config.hparams.weight_decay,
        speed.adamw_options(),
        mesh=mesh,
        micro_batches=split.accumulation,
    )
    steps = planned_steps(
        lambda e: steps_in_epoch(corpus, counts, config.seed, e, split.per_process),
        config.epochs,
        hp.min_steps if tabular else 0,
    )
    if min(steps) == 0:
        raise DataError(
            config.data_uri,
            f"some process gets fewer than its {split.per_process} samples of the "
            f"global --batch-size={config.batch_size} in an epoch ({env.world_size} processes share about "
            f"{corpus.samples(sum(counts.train))} samples); lower --batch-size or add data",
        )
    total = sum(steps) if config.max_steps is None else min(sum(steps), config.max_steps)
    held_out = held_out_samples(corpus, counts)
    evaluation = Evaluation(
        split="held-out" if held_out else "training",
        samples=held_out or steps[-1] * split.global_batch,
        train_samples=corpus.samples(sum(counts.train)),
        val_fraction=corpus.val_fraction,
    )
    # early stopping keeps a copy of the best weights, which only strategies that hold the whole model on every
    # rank have (ddp, zero1)
    stops = tabular and bool(held_out) and config.strategy not in FSDP_STRATEGIES
    scheduler = torch.optim.lr_scheduler.LambdaLR(wrapped.optimizer, lr_multiplier(total, config.hparams))
    # the run's line's folder when a retry goes on from its line's checkpoints, else the job's own
    checkpoint_dir = environ.get(CHECKPOINT_DIR_ENV) or environ.get("AIP_CHECKPOINT_DIR")
    store = CheckpointStore(checkpoint_dir, config.hparams.keep_checkpoints) if checkpoint_dir else None
    events = EventLog(environ.get("AIP_TENSORBOARD_LOG_DIR") if env.is_main else None)
    session = Session(
        config=config,
        env=env,
        device=device,
        precision=precision,
        corpus=corpus,
        counts=counts,
        steps_per_epoch=steps,
        total_steps=total,
        wrapped=wrapped,
        scheduler=scheduler,
        scaler=precision.grad_scaler(),
        store=store,
        events=events,
        data_spec=data_spec,
        evaluation=evaluation,
        early=EarlyStopping(patience=hp.early_stopping_patience if stops else 0, min_steps=hp.min_steps),
        warnings=held_out_warnings(held_out, hp.min_held_out, config.task) if tabular else [],
        data_read=data_read,
        speed=speed,
        compiled=CompileState(speed, compiled),
    )
    if store is not None:
        _resume(session, store)
    return session


def _resume(session: Session, store: CheckpointStore) -> None:
    """Load the newest committed checkpoint, if any, after checking it belongs to this run (the world size and the
    strategy may differ: the shards are resharded, trainer/loop.py restore)."""
    step = collectives.broadcast_object(store.latest())
    if step is None:
        return
    store.require_sharded(step)
    saved = store.record(step)
    mine = session.config.to_dict()
    different = [k for k in _RESUME_KEYS if saved.config.get(k) != mine.get(k)]
    if different:
        raise ConfigError(
            f"the checkpoint at step {step} in {store.root} is from a different run: {different} "
            "differ. Point AIP_CHECKPOINT_DIR at a fresh directory, or rerun with the same settings."
        )
    record = restore(session, store, step)
    log(
        "resumed from checkpoint",
        step=step,
        epoch=session.progress.epoch + 1,
        batch_in_epoch=session.progress.batch_in_epoch,
        samples_seen=record.samples_seen,
        world_size_then=record.world_size,
        strategy_then=record.strategy,
        work_lost_steps=session.work_lost[0],
        work_lost_seconds=session.work_lost[1],
    )


def _write_outputs(
    s: Session, model_dir: str, wall: float, environ: Mapping[str, str] | None = None
) -> dict[str, Any] | None:
    """Weights, config.json and metrics.json on rank 0 (with the champion's score on the same held-out split when
    the job names one, trainer/champion.py); every rank logs its weights' digest. Collective."""
    champion = score_champion(s, environ or {})
    weights = model_weights(s.wrapped)
    log("training finished", step=s.progress.step, weights_sha256=local_weights_digest(s.wrapped))
    document = None
    if s.env.is_main:
        preset = get_preset(s.config.model)
        save_model(
            model_dir, weights, model_config(s.config.task, preset, s.data_spec, s.config.to_dict(), s.precision.name)
        )
        document = _metrics(s, preset, sum(t.numel() for t in weights.values()), wall)
        if champion is not None:
            document["champion"] = champion
        storage.write_bytes(
            storage.join(model_dir, METRICS_FILE), json.dumps(document, indent=2).encode(), "application/json"
        )
        s.events.scalar("throughput/samples_per_second", document["samples_per_second"], s.progress.step)
        s.events.close()
        log(
            "model written",
            model_dir=model_dir,
            final=document["final"],
            evaluation=document["evaluation"],
            samples_per_second=document["samples_per_second"],
            mfu=document["mfu"],
        )
    collectives.barrier()
    return document


def _metrics(s: Session, preset: Preset, parameters: int, wall: float) -> dict[str, Any]:
    rate, step_seconds = training_rate(s)
    tokens = rate * preset.seq_len if isinstance(preset, GptPreset) else None
    mfu = None
    global_batch = s.config.batch_split(s.env.world_size).global_batch
    if s.device.startswith("cuda"):
        peak_memory: int | None = int(torch.cuda.max_memory_allocated(s.device))
    else:  # Linux reports ru_maxrss in KiB
        peak_memory = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    if s.device.startswith("cuda"):
        peak = peak_flops(torch.cuda.get_device_name(s.device), s.precision.name)
        mfu = model_flops_utilisation(rate, flops_per_sample(preset, parameters), peak, s.env.world_size)
    return metrics_document(
        task=s.config.task,
        model=s.config.model,
        strategy=s.config.strategy,
        world_size=s.env.world_size,
        steps=s.progress.step,
        epochs=s.progress.epochs,
        samples_per_second=rate,
        tokens_per_second=tokens,
        wall_time_seconds=wall,
        mfu=mfu,
        evaluation=s.evaluation,
        batch=s.config.batch_split(s.env.world_size).to_dict(),
        kept_epoch=s.early.best_epoch if s.best_weights is not None else None,
        early_stopping=s.early.to_dict() if s.early.patience else None,
        warnings=s.warnings,
        data=s.data_read,
        step_seconds=step_seconds,
        peak_memory_bytes=peak_memory,
        compile_seconds=s.compiled.seconds if s.compiled else None,
        warmup=_warmup(s, global_batch),
        resumed_from_step=s.resumed_from_step,
        work_lost=s.work_lost,
    )


def _warmup(s: Session, global_batch: int) -> dict[str, Any] | None:
    """metrics.json `warmup`: the first WARMUP_STEPS steps of this invocation apart from the rest."""
    if s.warmup_seconds is None:
        return None
    steady_samples = s.samples_trained - WARMUP_STEPS * global_batch
    steady_seconds = s.train_seconds - s.warmup_seconds
    return {
        "steps": WARMUP_STEPS,
        "seconds": s.warmup_seconds,
        "steady_steps": steady_samples // global_batch if global_batch else 0,
        "steady_seconds": steady_seconds,
        "steady_samples_per_second": steady_samples / steady_seconds if steady_samples and steady_seconds > 0 else None,
    }


def _oom(config: TrainConfig, s: Session, exc: BaseException) -> OutOfMemory:
    return OutOfMemory(
        f"out of memory on {s.device} at step {s.progress.step} (model {config.model}, --batch-size="
        f"{config.batch_size} as --micro-batch-size={config.batch_split(s.env.world_size).micro_batch} per process, "
        f"--strategy={config.strategy}, precision {s.precision.name}): lower --micro-batch-size (raising "
        "--gradient-accumulation-steps to keep the batch), add --activation-checkpointing, use --strategy=fsdp or "
        f"zero2 to shard the model, or a GPU with more memory. ({exc})"[:2000]
    )
