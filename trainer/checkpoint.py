"""Checkpoints in AIP_CHECKPOINT_DIR (gs://, /gcs/ or local): every rank writes its own shard, and a checkpoint
counts only once its commit record exists.

Layout of ROOT/step-000000120/:
  .metadata, __R_0.distcp  torch.distributed.checkpoint's files: rank R's shard of the model and optimizer, and
                           the index (.metadata) that lets any number of processes read them back, resharded
  resume.pt                what is not JSON: every rank's RNG state and epoch sums, the LR schedule, the loss scaler
  commit.json              the commit record (CommitRecord), written by rank 0 after every rank's shards are written
Only folders with commit.json are loaded; the newest is resumed from; the last k are kept. Where the shard files
go (straight to the bucket for gs://) is trainer/checkpoint_io.py's choice. A folder holding `state.pt` and
`COMPLETE` is a single-file checkpoint of an earlier trainer: it is recognised so that resuming refuses it by name.
"""

from __future__ import annotations

import functools
import io
import json
import time
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any

import torch

from schemas.checkpoint_layout import COMMIT, STEP_FILE
from trainer import collectives, storage
from trainer.errors import ConfigError
from trainer.logs import log
from trainer.models.gpt import qkv_rows_head_major

RESUME = "resume.pt"
LEGACY_MARKER = "COMPLETE"
"""The marker of an earlier trainer's single-file checkpoint (state.pt)."""
FORMAT = 3
"""3: a GPT's attention qkv rows are head-major (trainer/models/gpt.py). Format 2 checkpoints (an earlier trainer's,
data parallel only) are still resumed: a causal-lm one's qkv rows, and AdamW's moments of them, are query-key-value
major and are reordered on loading (CommitRecord.upgrade); the models without attention (tabular) are unchanged."""
READABLE_FORMATS = (2, FORMAT)


@dataclass(frozen=True)
class CommitRecord:
    """What a committed checkpoint is: where the run stood and the shape it was written by (commit.json)."""

    step: int
    epoch: int
    """0-based epoch the run was in."""
    batch_in_epoch: int
    """Optimizer steps already taken in that epoch."""
    samples_in_epoch: int
    """Global samples trained in that epoch (batch_in_epoch x the global batch)."""
    samples_seen: int
    """Global samples trained since step 0."""
    seed: int
    """The shuffle seed."""
    world_size: int
    strategy: str
    written_at: float
    """Unix time when the record was written."""
    config: dict[str, Any]
    """The resolved TrainConfig (TrainConfig.to_dict())."""
    data_spec: dict[str, Any]
    epochs: list[dict[str, Any]]
    """The finished epochs' figures (EpochResult.to_dict())."""
    early_stopping: dict[str, Any]
    best_weights: bool
    """Whether the shards hold the early-stopping copy of the best weights."""
    format: int = FORMAT
    work_lost_steps: int = 0
    """Steps trained and lost to stops before this checkpoint, over every attempt of the run's line (each resume from
    a checkpoint older than how far training had got)."""
    work_lost_seconds: float = 0.0
    """The wall seconds those steps took."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> CommitRecord:
        names = {f.name for f in fields(cls)}
        optional = {f.name for f in fields(cls) if f.default is not MISSING}  # added since: absent from older records
        missing = sorted(n for n in names - optional if n not in data)
        readable = data.get("format", FORMAT) in READABLE_FORMATS
        if missing or not readable:
            raise ValueError(
                f"{where}: expected a commit record of format {' or '.join(map(str, READABLE_FORMATS))} with "
                f"{sorted(names)}; it has format "
                f"{data.get('format')!r} and lacks {missing}. Point AIP_CHECKPOINT_DIR at a fresh directory."
            )
        return cls(**{k: v for k, v in data.items() if k in names})

    def upgrade(self, n_head: int) -> Callable[[str, torch.Tensor], torch.Tensor] | None:
        """How each tensor of the shards (model and optimizer state, keyed by parameter name) becomes what this
        trainer reads, for a GPT of n_head heads; None when they are read as they are. Format 2 causal-lm shards
        hold each block's attn.qkv rows query-key-value-major: they are reordered head-major."""
        if self.format == FORMAT or self.config.get("task") != "causal-lm":
            return None
        return functools.partial(qkv_rows_head_major, n_head=n_head)


PROGRESS = "progress.json"


@dataclass(frozen=True)
class ProgressMark:
    """How far an attempt trained past its newest checkpoint (progress.json beside the checkpoints, rank 0's): what a
    resume from an older checkpoint loses. Overwritten as training goes on; every attempt of the line writes it."""

    step: int
    since_step: int
    """The checkpoint (or the start) the attempt counted from when it wrote this."""
    seconds: float
    """Wall seconds from since_step's checkpoint (or the attempt's start) to step."""

    def lost_resuming_at(self, step: int) -> tuple[int, float]:
        """(steps, seconds) trained past `step` and lost when training resumes from the checkpoint of `step`; the
        seconds are the mark's, in proportion to the steps where it counted from another checkpoint."""
        if self.step <= step:
            return 0, 0.0
        span = self.step - self.since_step
        seconds = self.seconds * (self.step - step) / span if span > 0 else 0.0
        return self.step - step, round(seconds, 3)


def _dcp() -> tuple[Any, Any]:
    """torch.distributed.checkpoint and the bucket's reader and writer, imported by the first save or load: the
    import costs a second (DTensor's operators), which a run that never checkpoints should not wait for."""
    import torch.distributed.checkpoint as dcp

    from trainer import checkpoint_io

    return dcp, checkpoint_io


class CheckpointStore:
    """The checkpoints under one root URI."""

    def __init__(self, root: str, keep: int) -> None:
        self.root = root if root.endswith("/") else root + "/"
        self.keep = keep

    def dir(self, step: int) -> str:
        return storage.join(self.root, f"step-{step:09d}")

    def _listing(self) -> tuple[set[int], set[int], set[int]]:
        """(committed steps, earlier trainers' complete steps, every step seen)."""
        committed: set[int] = set()
        legacy: set[int] = set()
        seen: set[int] = set()
        if not storage.is_gcs(self.root) and not storage.exists(self.root):
            return committed, legacy, seen
        for uri in storage.list_files(self.root):
            match = STEP_FILE.search(uri)
            if match:
                step = int(match.group(1))
                seen.add(step)
                if match.group(2) == COMMIT:
                    committed.add(step)
                elif match.group(2) == LEGACY_MARKER:
                    legacy.add(step)
        return committed, legacy, seen

    def complete_steps(self) -> list[int]:
        """Steps with a commit record (and earlier trainers' complete ones), oldest first."""
        committed, legacy, _ = self._listing()
        return sorted(committed | legacy)

    def latest(self) -> int | None:
        steps = self.complete_steps()
        return steps[-1] if steps else None

    def require_sharded(self, step: int) -> None:
        """A ConfigError when step is an earlier trainer's single-file checkpoint (no commit record)."""
        if not storage.exists(storage.join(self.dir(step), COMMIT)):
            raise ConfigError(
                f"the checkpoint at step {step} in {self.root} is a single-file checkpoint (state.pt) of an earlier "
                "trainer; this trainer reads sharded checkpoints (commit.json beside torch.distributed.checkpoint "
                "shards) only. Resume it with the trainer image that wrote it, or point AIP_CHECKPOINT_DIR at a "
                "fresh directory to start again."
            )

    def save(self, step: int, shards: dict[str, Any], record: CommitRecord, resume: dict[str, Any]) -> str:
        """Write a checkpoint of step; returns its URI. Collective: every rank passes its shards (its part of the
        model and optimizer state); record and resume are rank 0's (ignored elsewhere). What a writer that died
        at the same step left is removed first. Rank 0 writes resume.pt and the commit record only after every
        rank's shards are written, then prunes."""
        started = time.monotonic()
        target = self.dir(step)
        if collectives.rank() == 0:  # what a writer that died at this step left (other ranks' shard files too)
            storage.delete_tree(target)
        collectives.barrier()
        dcp, checkpoint_io = _dcp()
        dcp.save(shards, storage_writer=checkpoint_io.writer(target), no_dist=not collectives.active())
        collectives.barrier()  # every rank's shard files are complete before the record says so
        if collectives.rank() == 0:
            buffer = io.BytesIO()
            torch.save(resume, buffer)
            storage.write_bytes(storage.join(target, RESUME), buffer.getvalue())
            storage.write_bytes(storage.join(target, COMMIT), json.dumps(record.to_dict()).encode(), "application/json")
            size = sum(size for _, _, size in storage.list_objects(target))
            seconds = round(time.monotonic() - started, 3)
            log("checkpoint saved", step=step, uri=target + "/", bytes=size, seconds=seconds)
            self.prune()
        collectives.barrier()
        return target

    def mark_progress(self, mark: ProgressMark) -> None:
        """Write progress.json (rank 0). A mark that cannot be written is logged: it only measures what a stop
        would lose, and training goes on."""
        uri = storage.join(self.root, PROGRESS)
        try:
            storage.write_bytes(uri, json.dumps(asdict(mark)).encode(), "application/json")
        except Exception as exc:  # any storage error: the figure is lost, never the run
            log("progress mark not written", severity="WARNING", uri=uri, error=str(exc)[:500])

    def progress(self) -> ProgressMark | None:
        """The newest progress mark of the line, or None (none written, or not one this trainer reads)."""
        uri = storage.join(self.root, PROGRESS)
        try:
            if not storage.exists(uri):
                return None
            with storage.open_read(uri) as stream:
                data = json.loads(stream.read(4096))
            mark = ProgressMark(int(data["step"]), int(data["since_step"]), float(data["seconds"]))
        except Exception as exc:  # a mark unread (or not JSON) loses the figure, never the resume
            log("progress mark not read", severity="WARNING", uri=uri, error=str(exc)[:500])
            return None
        return mark if mark.step >= 0 and mark.since_step >= 0 and mark.seconds >= 0 else None

    def record(self, step: int) -> CommitRecord:
        uri = storage.join(self.dir(step), COMMIT)
        with storage.open_read(uri) as stream:
            return CommitRecord.from_dict(json.loads(stream.read()), uri)

    def resume_state(self, step: int) -> dict[str, Any]:
        """resume.pt: per-rank RNG states and epoch sums, the LR schedule's and the loss scaler's state."""
        uri = storage.join(self.dir(step), RESUME)
        with storage.open_read(uri) as stream:
            state = torch.load(io.BytesIO(stream.read()), map_location="cpu", weights_only=True)
        if not isinstance(state, dict):
            raise TypeError(f"{uri}: expected a dict, got {type(state).__name__}")
        return state

    def load_shards(self, step: int, shards: dict[str, Any]) -> None:
        """Fill shards (this rank's state dicts, as templates of the right shapes) in place from the checkpoint,
        whatever the number of processes and strategy that wrote it. Collective."""
        dcp, checkpoint_io = _dcp()
        dcp.load(shards, storage_reader=checkpoint_io.reader(self.dir(step)), no_dist=not collectives.active())

    def prune(self) -> None:
        """Keep the newest `keep` complete checkpoints; drop older ones and abandoned partial ones."""
        committed, legacy, seen = self._listing()
        complete = committed | legacy
        kept = sorted(complete)[-self.keep :]
        newest = kept[-1] if kept else -1
        for step in sorted(seen):
            if step in kept or (step not in complete and step > newest):
                continue
            storage.delete_tree(self.dir(step))
