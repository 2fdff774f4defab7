"""The training loop: steps, periodic and preemption checkpoints, end-of-epoch evaluation.

It sees only a Session (the run's assembled parts) and never branches on how the job was launched.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from schemas.data_objects import DataRead
from schemas.model_presets import GptPreset, get_preset
from schemas.run_metrics import RunWarning
from trainer import collectives
from trainer.checkpoint import FORMAT, CheckpointStore, CommitRecord, ProgressMark
from trainer.config import TrainConfig
from trainer.datasets.stream import Corpus, Counts, eval_batches, eval_batches_needed, train_batches
from trainer.distributed import DistEnv
from trainer.errors import Preempted
from trainer.events import EventLog
from trainer.logs import log
from trainer.metrics import EpochResult, Evaluation
from trainer.objectives import score, training_loss
from trainer.parallel import (
    Wrapped,
    adamw_implementation,
    clip_gradients,
    finish_gradients,
    gradient_sync,
    load_sharded_state,
    sharded_state,
)
from trainer.precision import Precision
from trainer.preemption import PreemptionWatch
from trainer.sizing import EarlyStopping
from trainer.speed import CompileState, SpeedSettings, first_step, read_ahead


@dataclass
class Progress:
    """Where the run stands; saved in every checkpoint (the data position is (epoch, batch_in_epoch))."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    epochs: list[EpochResult] = field(default_factory=list)
    epoch_sums: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    """This rank's [loss sum, correct, items] over the current epoch's training batches."""


@dataclass
class Session:
    """Everything the loop needs, assembled by trainer/run.py."""

    config: TrainConfig
    env: DistEnv
    device: str
    precision: Precision
    corpus: Corpus
    counts: Counts
    steps_per_epoch: list[int]
    total_steps: int
    wrapped: Wrapped
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    store: CheckpointStore | None
    events: EventLog
    data_spec: dict[str, Any]
    evaluation: Evaluation
    """Which split the epoch figures are measured on, and its size."""
    early: EarlyStopping = field(default_factory=lambda: EarlyStopping(patience=0))
    """The best held-out loss so far (trainer/sizing.py); patience 0 = train every epoch, keep the last weights."""
    warnings: list[RunWarning] = field(default_factory=list)
    """What metrics.json warns about the run (schemas/run_metrics.py)."""
    best_weights: dict[str, torch.Tensor] | None = None
    """A copy of the model's state at early.best_epoch, keyed by the bare model's names (only while early stopping
    is on)."""
    data_read: DataRead | None = None
    """The dataset version's objects this run reads (metrics.json `data`)."""
    progress: Progress = field(default_factory=Progress)
    train_seconds: float = 0.0
    samples_trained: int = 0
    """Global samples trained by this invocation (not counting what a resumed checkpoint had done)."""
    last_checkpoint_step: int | None = None
    last_checkpoint_at: float = field(default_factory=time.monotonic)
    """time.monotonic() of the last checkpoint, or of the session's start: the clock --checkpoint-every-seconds
    keeps."""
    resumed_from_step: int = 0
    """The step of the checkpoint this invocation resumed from (metrics.json `resumed_from_step`); 0: it started
    fresh."""
    work_lost: tuple[int, float] = (0, 0.0)
    """(steps, wall seconds) trained and lost to stops over the run's line, this invocation's resume included
    (metrics.json `work_lost_steps`, `work_lost_seconds`)."""
    progress_marked_at: float = field(default_factory=time.monotonic)
    """time.monotonic() of rank 0's last progress mark (trainer/checkpoint.py ProgressMark), or of the start."""
    speed: SpeedSettings | None = None
    """How this process trains fast (trainer/speed.py); None: PyTorch's defaults, nothing compiled."""
    compiled: CompileState | None = None
    """The compiled blocks until the first step has compiled them (or fallen back to eager)."""
    warmup_seconds: float | None = None
    """Training seconds of this invocation's first WARMUP_STEPS steps (compilation, allocator and caches warming
    up); None while fewer have run."""


WARMUP_STEPS = 3
"""Steps at the start of each invocation whose time metrics.json reports apart (`warmup`), so that the steady rate
can be read without them."""


def sync(device: str) -> None:
    """Wait for the device's queued work (a no-op on CPU), so a clock read afterwards includes it."""
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def training_rate(s: Session) -> tuple[float, float | None]:
    """(global samples per second, seconds per optimizer step) over this invocation's training steps, leaving out
    the first step when it compiled the blocks: its time is compile_seconds, compilation rather than training."""
    global_batch = s.config.batch_split(s.env.world_size).global_batch
    samples, seconds = s.samples_trained, s.train_seconds
    compiled = s.compiled.seconds if s.compiled else None
    if compiled is not None and samples > global_batch:
        samples, seconds = samples - global_batch, seconds - compiled
    steps = samples // global_batch if global_batch else 0
    rate = samples / seconds if seconds > 0 else 0.0
    return rate, (seconds / steps if steps else None)


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def data_rank(s: Session) -> int:
    """The data shard this process trains and evaluates: its rank, or under tensor or pipeline parallelism its dp
    coordinate (the processes of one model copy train the same samples)."""
    return s.config.layout(s.env.world_size).data_rank(s.env.rank)


def counted(s: Session, scores: torch.Tensor) -> torch.Tensor:
    """scores as this process's part of a sum over every process: itself where the process counts its data
    shard's samples (always without model parallelism), zeros on the model-parallel peers that hold a copy."""
    if s.config.layout(s.env.world_size).counts_data(s.env.rank):
        return scores
    return torch.zeros_like(scores)


def commit_record(s: Session) -> CommitRecord:
    """Where the run stands, for the checkpoint's commit record."""
    p = s.progress
    global_batch = s.config.batch_split(s.env.world_size).global_batch
    return CommitRecord(
        step=p.step,
        epoch=p.epoch,
        batch_in_epoch=p.batch_in_epoch,
        samples_in_epoch=p.batch_in_epoch * global_batch,
        samples_seen=p.step * global_batch,
        seed=s.config.seed,
        world_size=s.env.world_size,
        strategy=s.config.strategy,
        written_at=time.time(),
        config=s.config.to_dict(),
        data_spec=s.data_spec,
        epochs=[e.to_dict() for e in p.epochs],
        early_stopping=dict(s.early.to_dict()),
        best_weights=s.best_weights is not None,
        work_lost_steps=s.work_lost[0],
        work_lost_seconds=s.work_lost[1],
    )


def save_checkpoint(s: Session) -> None:
    """Write a checkpoint of the current step: every rank its shard, then rank 0 the commit record. Collective."""
    if s.store is None or s.last_checkpoint_step == s.progress.step:
        return
    shards = sharded_state(s.wrapped)
    if s.best_weights is not None:  # the same copy on every rank (ddp, zero1): written once
        shards["best_weights"] = s.best_weights
    per_rank = collectives.all_gather_object({"rng": rng_state(), "epoch_sums": list(s.progress.epoch_sums)})
    resume = {"per_rank": per_rank, "scheduler": s.scheduler.state_dict(), "scaler": s.scaler.state_dict()}
    s.store.save(s.progress.step, shards, commit_record(s), resume)
    s.last_checkpoint_step = s.progress.step


def restore(s: Session, store: CheckpointStore, step: int) -> CommitRecord:
    """Put a committed checkpoint back, whatever world size and strategy wrote it: weights and optimizer
    (resharded), schedule, scaler, data position, RNG. Collective.

    The data position is the global samples trained in the epoch: with the global batch kept (the plan keeps it
    through accumulation) that is the same optimizer step in the epoch at any world size. With another world size,
    rank r takes the RNG state of the writer's rank r mod its world size, and rank 0 carries the epoch's training
    sums of every writer (they are summed across ranks at the epoch's end)."""
    record = store.record(step)
    resume = store.resume_state(step)
    load_state(s, store, step, record)
    if s.speed is not None:  # the implementation is this device's choice, not the one saved with the state
        for group in s.wrapped.optimizer.param_groups:
            implementation = adamw_implementation(s.wrapped.model, s.speed.adamw_options())
            group.update({"fused": None, "foreach": None, **implementation})
    s.scheduler.load_state_dict(resume["scheduler"])
    s.scaler.load_state_dict(resume["scaler"])
    per_rank = resume["per_rank"]
    set_rng_state(per_rank[s.env.rank % len(per_rank)]["rng"])
    s.progress = Progress(
        step=record.step,
        epoch=record.epoch,
        batch_in_epoch=record.samples_in_epoch // s.config.batch_split(s.env.world_size).global_batch,
        epochs=[EpochResult(**e) for e in record.epochs],
        epoch_sums=_epoch_sums(per_rank, s.env.rank, s.env.world_size),
    )
    s.last_checkpoint_step = s.resumed_from_step = record.step
    mark = store.progress()
    lost = mark.lost_resuming_at(record.step) if mark is not None else (0, 0.0)
    s.work_lost = (record.work_lost_steps + lost[0], round(record.work_lost_seconds + lost[1], 3))
    saved = record.early_stopping
    # whether early stopping is on is this run's decision (off where no rank holds the whole model: FSDP)
    holds_weights = s.early.patience > 0
    s.early = EarlyStopping(
        patience=s.early.patience,
        min_steps=int(saved["min_steps"]),
        best_loss=float(saved["best_loss"]),
        best_epoch=int(saved["best_epoch"]),
        stale=int(saved["stale"]),
        stopped_epoch=int(saved["stopped_epoch"]),
    )
    s.best_weights = None
    if record.best_weights and holds_weights:
        best = {"best_weights": {k: v.detach().clone() for k, v in s.wrapped.inner.state_dict().items()}}
        store.load_shards(step, best)
        s.best_weights = best["best_weights"]
    return record


def load_state(s: Session, store: CheckpointStore, step: int, record: CommitRecord) -> None:
    """The model and optimizer from the committed checkpoint of step (record: its commit record), resharded for
    this run's layout, and upgraded from an earlier trainer's format where the record says so. Collective."""
    preset = get_preset(s.config.model)
    upgrade = record.upgrade(preset.n_head) if isinstance(preset, GptPreset) else None
    if upgrade is not None and s.env.is_main:
        log("upgrading checkpoint", step=step, format_then=record.format, format=FORMAT)
    load_sharded_state(s.wrapped, lambda state: store.load_shards(step, state), upgrade)


def _epoch_sums(per_rank: list[dict[str, Any]], rank: int, world_size: int) -> list[float]:
    """This rank's share of the epoch's training sums: its own at the same world size; otherwise rank 0 holds
    them all (only their sum across ranks is ever read)."""
    if len(per_rank) == world_size:
        return [float(v) for v in per_rank[rank]["epoch_sums"]]
    if rank != 0:
        return [0.0, 0.0, 0.0]
    return [float(sum(r["epoch_sums"][i] for r in per_rank)) for i in range(3)]


def train_step(s: Session, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """One optimizer step over this process's share of the global batch; returns [loss sum, correct, items] of the
    share (on the device, no host sync), counted once over the processes of one model copy (see counted()).

    The share is cut into the planned micro-batches. Each micro-batch's mean loss is scaled by 1/accumulation, so the
    accumulated gradient is the share's mean, and the reduction across processes (on the last micro-batch only)
    makes it the global batch's mean: the same update as one pass over the whole batch. Under pipeline parallelism
    the micro-batches are the pipeline schedule's (it scales the gradients by 1/micro-batches).
    """
    x, y = x.to(s.device, non_blocking=True), y.to(s.device, non_blocking=True)
    task, optimizer = s.config.task, s.wrapped.optimizer
    split = s.config.batch_split(s.env.world_size)
    if s.wrapped.pipeline is not None:
        scores = _pipeline_step(s, x, y)
    else:
        scores = torch.zeros(3, dtype=torch.float64, device=s.device)
        for i, (xm, ym) in enumerate(zip(x.split(split.micro_batch), y.split(split.micro_batch), strict=True)):
            with gradient_sync(s.wrapped, enabled=i == split.accumulation - 1):
                with s.precision.autocast():
                    output = s.wrapped.model(xm)
                loss = training_loss(task, output, ym) / split.accumulation
                s.scaler.scale(loss).backward()
            with torch.no_grad():
                scores += score(task, output.detach(), ym)
    finish_gradients(s.wrapped)
    if s.config.hparams.grad_clip > 0:
        s.scaler.unscale_(optimizer)
        clip_gradients(s.wrapped, s.config.hparams.grad_clip)
    s.scaler.step(optimizer)
    s.scaler.update()
    optimizer.zero_grad(set_to_none=True)
    s.scheduler.step()
    return counted(s, scores)


def _pipeline_step(s: Session, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """One pipeline schedule step (forward and backward of every micro-batch); the share's scores, computed on the
    last stage and broadcast to every stage."""
    pipeline, mesh = s.wrapped.pipeline, s.wrapped.mesh
    assert pipeline is not None and mesh is not None
    pipeline.scale = s.scaler.scale
    losses: list[torch.Tensor] = []
    with s.precision.autocast():
        if mesh.first_stage:
            output = pipeline.schedule.step(x)
        elif mesh.last_stage:
            output = pipeline.schedule.step(target=y, losses=losses)
        else:
            output = pipeline.schedule.step()
    return _from_last_stage(s, output, y)


def _from_last_stage(s: Session, output: Any, y: torch.Tensor) -> torch.Tensor:
    """score() of the last stage's output, on every stage of the pipeline (broadcast over the pp group)."""
    import torch.distributed as dist

    mesh = s.wrapped.mesh
    assert mesh is not None
    scores = torch.zeros(3, dtype=torch.float64, device=s.device)
    if mesh.last_stage:
        with torch.no_grad():
            scores = score(s.config.task, output.detach(), y)
    dist.broadcast(scores, group=mesh.group("pp"), group_src=mesh.layout.pipeline_parallel - 1)
    return scores


def _step(s: Session, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """train_step; the first one with compiled blocks is timed (compilation happens in it) and falls back to eager
    when compiling fails (trainer/speed.py first_step)."""
    state = s.compiled
    if state is None or not state.pending:
        return train_step(s, x, y)
    result = first_step(
        state,
        lambda: train_step(s, x, y),
        lambda: sync(s.device),
        lambda: s.wrapped.optimizer.zero_grad(set_to_none=True),
    )
    if state.fallback is not None:
        log("compile failed; training eagerly", severity="WARNING", reason=state.fallback)
        s.warnings.append(RunWarning("compile-fallback", state.fallback))
    elif s.env.is_main:
        log("blocks compiled", compile_seconds=state.seconds, units=len(state.units))
    return result


@torch.no_grad()
def evaluate(s: Session, model: torch.nn.Module | None = None) -> torch.Tensor:
    """[loss sum, correct, items, target sum, target sum of squares] over every rank's held-out records (all ranks
    run the same batch count); the target sums (regression, standardised) give R². model: another module to score
    on the same records (the route's champion, trainer/champion.py); default the one being trained."""
    split = s.config.batch_split(s.env.world_size)
    pipelined = model is None and s.wrapped.pipeline is not None
    # what fits in memory, without gradients even more; a pipeline takes its micro-batches together
    batch = split.per_process if pipelined else split.micro_batch
    needed = eval_batches_needed(s.corpus, s.counts, batch)
    totals = torch.zeros(5, dtype=torch.float64, device=s.device)
    scored = s.wrapped.model if model is None else model
    scored.eval()
    try:
        for (x, y), real in eval_batches(s.corpus, data_rank(s), batch, needed):
            x, y = x.to(s.device), y.to(s.device)
            with s.precision.autocast():
                batch_scores = _pipeline_eval(s, x, y) if pipelined else score(s.config.task, scored(x), y)
            if real:
                totals[:3] += batch_scores
                if s.config.task == "tabular-regression":
                    target = y.double()
                    totals[3:] += torch.stack([target.sum(), (target * target).sum()])
    finally:
        s.wrapped.model.train()
    return collectives.all_reduce(counted(s, totals), s.device)


def _pipeline_eval(s: Session, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """score() of a batch through the pipeline, forward only, on every stage. A short batch (the last one, or
    evaluation's padding) is filled up to the schedule's micro-batches with zeros, which are not scored."""
    pipeline, mesh = s.wrapped.pipeline, s.wrapped.mesh
    assert pipeline is not None and mesh is not None
    rows, full = x.shape[0], s.config.batch_split(s.env.world_size).per_process
    if rows < full:
        x = torch.cat([x, x.new_zeros((full - rows, *x.shape[1:]))])
    if mesh.first_stage:
        output = pipeline.schedule.eval(x)
    elif mesh.last_stage:
        output = pipeline.schedule.eval(target=torch.cat([y, y.new_zeros((full - rows, *y.shape[1:]))]), losses=[])
    else:
        output = pipeline.schedule.eval()
    return _from_last_stage(s, output[:rows] if mesh.last_stage else output, y)


def epoch_result(s: Session, epoch: int) -> EpochResult:
    """Held-out figures for the epoch, or the training batches' figures when nothing is held out."""
    totals = evaluate(s).cpu()
    if totals[2] == 0:
        sums = collectives.all_reduce(torch.tensor(s.progress.epoch_sums, dtype=torch.float64), s.device).cpu()
        # training batches: the target was standardised on the training rows, so its variance there is 1
        totals = torch.cat([sums, torch.tensor([0.0, float(sums[2])], dtype=torch.float64)])
    return figures(s, totals, epoch)


def figures(s: Session, totals: torch.Tensor, epoch: int) -> EpochResult:
    """The task's figures from evaluate()'s totals."""
    items = max(float(totals[2]), 1.0)
    loss = float(totals[0]) / items
    task = s.config.task
    accuracy = float(totals[1]) / items if task == "tabular-classification" else None
    perplexity = math.exp(min(loss, 700.0)) if task == "causal-lm" else None
    r2 = rmse = None
    if task == "tabular-regression":
        spread = float(totals[4]) - float(totals[3]) ** 2 / items  # sum of squares about the held-out mean
        r2 = 1.0 - float(totals[0]) / spread if spread > 0 else None
        rmse = math.sqrt(loss) * float(s.data_spec.get("label_std", 1.0))
    return EpochResult(epoch=epoch + 1, loss=loss, accuracy=accuracy, perplexity=perplexity, r2=r2, rmse=rmse)


def run_loop(s: Session, watch: PreemptionWatch) -> None:
    """Train from s.progress to the end (all epochs, or --max-steps), checkpointing as configured."""
    config, p = s.config, s.progress
    split = config.batch_split(s.env.world_size)
    window = torch.zeros(2, dtype=torch.float64, device=s.device)  # [sum of batch mean losses, steps]
    ended_inside_epoch = False
    saved_last = False  # across epochs: a save at an epoch's last step spends the flag the next epoch's first step gets
    for epoch in range(p.epoch, len(s.steps_per_epoch)):
        if epoch != p.epoch:
            if p.step >= s.total_steps:
                break
            p.epoch, p.batch_in_epoch, p.epoch_sums = epoch, 0, [0.0, 0.0, 0.0]
        sums = torch.tensor(p.epoch_sums, dtype=torch.float64, device=s.device)
        steps = min(s.steps_per_epoch[epoch], p.batch_in_epoch + s.total_steps - p.step)
        batches = train_batches(
            s.corpus,
            config.seed,
            epoch,
            data_rank(s),
            split.per_process,
            config.hparams.shuffle_window,
            steps,
            skip=p.batch_in_epoch,
        )
        clock = _Clock()
        if s.speed is not None:
            batches = read_ahead(batches, s.speed.prefetch_batches, s.speed.pin_memory)
        for x, y in batches:
            batch_scores = _step(s, x, y)
            sums += batch_scores
            window += torch.stack([batch_scores[0] / batch_scores[2], torch.ones_like(batch_scores[0])])
            p.step += 1
            p.batch_in_epoch += 1
            s.samples_trained += split.global_batch
            if s.samples_trained == WARMUP_STEPS * split.global_batch:
                sync(s.device)
                s.warmup_seconds = s.train_seconds + clock.elapsed()
            due = bool(config.checkpoint_every_seconds) and (
                time.monotonic() - s.last_checkpoint_at >= config.checkpoint_every_seconds
            )
            stop, clock_due = watch.agreed(s.device, due)
            # the agreed flags are the previous call's: those computed before the last save are spent
            clock_due, saved_last = clock_due and not saved_last, False
            if p.step % config.hparams.log_every == 0 and s.env.is_main:
                _log_progress(s, float(window[0] / window[1]), s.train_seconds + clock.elapsed())
                window.zero_()
            by_steps = config.checkpoint_every is not None and p.step % config.checkpoint_every == 0
            if not (stop or by_steps or clock_due):
                _mark_progress(s)
            if stop or by_steps or clock_due:
                p.epoch_sums = sums.tolist()
                with clock.paused():
                    save_checkpoint(s)
                s.last_checkpoint_at, saved_last = time.monotonic(), True
                if stop:
                    watch.drain()
                    raise Preempted(f"stopped by a signal at step {p.step}; the newest checkpoint resumes it")
        sync(s.device)
        s.train_seconds += clock.elapsed()
        p.epoch_sums = sums.tolist()
        if p.batch_in_epoch < s.steps_per_epoch[epoch]:
            ended_inside_epoch = True  # --max-steps stopped the run part-way through this epoch
            break
        _finish_epoch(s, epoch)
        if epoch + 1 < len(s.steps_per_epoch) and s.early.should_stop(p.step):
            s.early.stopped_epoch = epoch + 1
            if s.env.is_main:
                log(
                    "early stopping",
                    step=p.step,
                    epoch=epoch + 1,
                    best_epoch=s.early.best_epoch,
                    best_loss=s.early.best_loss,
                    patience=s.early.patience,
                )
            break
    if ended_inside_epoch or not p.epochs:
        _finish_epoch(s, p.epoch)
    if s.best_weights is not None and s.early.best_epoch != p.epochs[-1].epoch:
        s.wrapped.inner.load_state_dict(s.best_weights)  # every rank holds the same copy (ddp, zero1)


def _mark_progress(s: Session) -> None:
    """Rank 0 marks how far training got past its last checkpoint, at most every --progress-every-seconds: a stop
    with no checkpoint of its own loses the steps since, and the next attempt reads how many."""
    now = time.monotonic()
    if s.store is None or not s.env.is_main or now - s.progress_marked_at < s.config.progress_every_seconds:
        return
    since = s.last_checkpoint_step if s.last_checkpoint_step is not None else s.resumed_from_step
    s.store.mark_progress(ProgressMark(s.progress.step, since, round(now - s.last_checkpoint_at, 3)))
    s.progress_marked_at = now


def _finish_epoch(s: Session, epoch: int) -> None:
    result = epoch_result(s, epoch)
    s.progress.epochs.append(result)
    if s.early.patience > 0 and s.early.record(result.epoch, result.loss):
        # keyed by the bare model's names, as a checkpoint holds them whatever the wrapper
        s.best_weights = {k: v.detach().clone() for k, v in s.wrapped.inner.state_dict().items()}
    if s.env.is_main:
        log(
            "epoch finished",
            **result.to_dict(),
            step=s.progress.step,
            evaluated_on=s.evaluation.split,
            evaluated_samples=s.evaluation.samples,
        )
        for name in ("loss", "accuracy", "perplexity"):
            value = getattr(result, name)
            if value is not None:
                s.events.scalar(f"eval/{name}", value, s.progress.step)
        s.events.sync()


class _Clock:
    """Seconds spent training, leaving out the time spent writing checkpoints."""

    def __init__(self) -> None:
        self._start = time.perf_counter()
        self._paused = 0.0

    def elapsed(self) -> float:
        return time.perf_counter() - self._start - self._paused

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self._paused += time.perf_counter() - began


def _log_progress(s: Session, loss: float, seconds: float) -> None:
    p = s.progress
    lr = float(s.scheduler.get_last_lr()[0])  # a tensor only where the optimizer was given one
    rate = s.samples_trained / seconds if seconds > 0 else None
    log(
        "training",
        step=p.step,
        total_steps=s.total_steps,
        epoch=p.epoch + 1,
        loss=loss,
        learning_rate=lr,
        samples_per_second=rate,
    )
    s.events.scalar("train/loss", loss, p.step)
    s.events.scalar("train/learning_rate", lr, p.step)
