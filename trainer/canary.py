"""The built-in trainer's canary mode (docs/canary.md): with LANDFALL_CANARY=1 the trainer runs at most
LANDFALL_CANARY_STEPS optimizer steps at the planned micro-batch, times one all-reduce of LANDFALL_CANARY_BUCKET_BYTES
across every process, writes a checkpoint and reads it back, and writes canary.json (schemas/canary.py) to
AIP_MODEL_DIR instead of a model. An error on the way fails the job as any error does (failure.json, classified);
a checkpoint that reads back different is reported in `failed`.

Peak memory: on GPU the most memory torch allocated on any process (torch.cuda.max_memory_allocated); on CPU, where
there is no GPU memory to measure, the largest resident set of any process (ru_maxrss), reported as `cpu-rss`.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from schemas.canary import (
    BUCKET_BYTES,
    CANARY_BUCKET_ENV,
    CANARY_ENV,
    CANARY_REPORT_FILE,
    CANARY_STEPS,
    CANARY_STEPS_ENV,
    CanaryFigures,
)
from trainer import collectives, storage
from trainer.errors import ConfigError
from trainer.logs import log
from trainer.loop import Session, save_checkpoint, training_rate
from trainer.parallel import load_sharded_state, model_weights


@dataclass(frozen=True)
class CanaryMode:
    steps: int
    bucket_bytes: int


def canary_mode(environ: Mapping[str, str]) -> CanaryMode | None:
    """The canary's settings when LANDFALL_CANARY=1, else None; ConfigError naming a malformed variable."""
    if environ.get(CANARY_ENV, "") != "1":
        return None
    values = {}
    for name, default in ((CANARY_STEPS_ENV, CANARY_STEPS), (CANARY_BUCKET_ENV, BUCKET_BYTES)):
        raw = environ.get(name, str(default))
        try:
            values[name] = int(raw)
        except ValueError:
            values[name] = 0
        if values[name] < 1:
            raise ConfigError(f"{name} must be a whole number of at least 1 in canary mode, got {raw!r}")
    return CanaryMode(steps=values[CANARY_STEPS_ENV], bucket_bytes=values[CANARY_BUCKET_ENV])


def _peak_memory(device: str) -> tuple[int, str]:
    if device.startswith("cuda"):
        local = int(torch.cuda.max_memory_allocated(device))
        kind = "gpu"
    else:
        scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
        local = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * scale
        kind = "cpu-rss"
    peak = collectives.all_reduce(torch.tensor([local], dtype=torch.float64), device, op="max")
    return int(peak.item()), kind


def _allreduce(mode: CanaryMode, s: Session) -> tuple[float, float]:
    """Seconds of one all-reduce of mode.bucket_bytes (fp32) over every process, and its bus bandwidth in GB/s."""
    tensor = torch.ones(max(1, mode.bucket_bytes // 4), dtype=torch.float32, device=s.device)
    collectives.barrier()
    if s.device.startswith("cuda"):
        torch.cuda.synchronize(s.device)
    began = time.perf_counter()
    collectives.all_reduce(tensor, s.device)
    if s.device.startswith("cuda"):
        torch.cuda.synchronize(s.device)
    seconds = collectives.all_reduce(torch.tensor([time.perf_counter() - began]), s.device, op="max").item()
    n = s.env.world_size
    bus = 2 * (n - 1) / n * tensor.numel() * 4 if n > 1 else tensor.numel() * 4
    return float(seconds), bus / seconds / 1e9 if seconds > 0 else 0.0


def _checkpoint(s: Session) -> tuple[int | None, bool | None, str]:
    """Write a checkpoint and read it back into the model (rank 0 compares the weights before and after):
    (the checkpoint's bytes, equal, what failed). Collective."""
    store = s.store
    if store is None:
        return None, None, ""
    written = model_weights(s.wrapped)
    save_checkpoint(s)
    step = collectives.broadcast_object(store.latest())
    if step is None:
        return None, False, f"the checkpoint written under {store.root} is not there to read back"
    load_sharded_state(s.wrapped, lambda state: store.load_shards(step, state))
    loaded = model_weights(s.wrapped)
    if not s.env.is_main:
        return None, None, ""
    same = loaded.keys() == written.keys() and all(torch.equal(loaded[k], v) for k, v in written.items())
    size = sum(size for _, _, size in storage.list_objects(store.dir(step)))
    return size, same, "" if same else f"the checkpoint at step {step} read back different weights"


def finish_canary(s: Session, mode: CanaryMode, model_dir: str) -> CanaryFigures:
    """After the canary's steps: measure, check, and write canary.json on rank 0. Collective."""
    steps = s.progress.step
    _, step_seconds = training_rate(s)  # the step that compiled the blocks left out (trainer/loop.py)
    peak, kind = _peak_memory(s.device)
    seconds, gbps = _allreduce(mode, s)
    size, ok, failed = _checkpoint(s)
    figures = CanaryFigures(
        steps=steps,
        step_seconds=None if step_seconds is None else round(step_seconds, 6),
        peak_memory_bytes=peak,
        memory_kind=kind,
        allreduce_bytes=mode.bucket_bytes,
        allreduce_seconds=round(seconds, 6),
        allreduce_gbps=round(gbps, 3),
        processes=s.env.world_size,
        checkpoint_bytes=size,
        checkpoint_ok=ok,
        failed=failed,
    )
    if s.env.is_main:
        report = json.dumps(figures.to_dict(), indent=2).encode()
        storage.write_bytes(storage.join(model_dir, CANARY_REPORT_FILE), report, "application/json")
        log("canary finished", **figures.to_dict())
    collectives.barrier()
    return figures


__all__ = ["CanaryMode", "canary_mode", "finish_canary"]
