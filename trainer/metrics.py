"""The run's figures: model FLOPs and MFU, and the metrics.json document the listener records.

metrics.json (schema_version 1): {"schema_version", "task", "model", "strategy", "world_size", "steps", "final":
{"loss", "accuracy", "perplexity"[, "r2", "rmse"]}, "epochs": [{"epoch", "loss", "accuracy", "perplexity" [, "r2",
"rmse"]}], "evaluation": {"split", "samples", "train_samples", "val_fraction"}, "samples_per_second",
"tokens_per_second", "wall_time_seconds", "mfu", "step_seconds", "peak_memory_bytes", "compile_seconds", "warmup",
"resumed_from_step", ["work_lost_steps", "work_lost_seconds",] ["early_stopping": {"min_steps", "patience",
"best_loss", "best_epoch", "stale", "stopped_epoch"},] "warnings": [{"code", "message"}], "data": {"object_count",
"total_bytes", "objects_digest", "source", "objects"}} (`data`: the dataset version's objects read,
schemas/data_objects.py DataRead; schemas/run_metrics.py reads the warnings and each task's figures).
Loss, accuracy and perplexity are measured on the held-out split (--hparam val_fraction, grown on small tables by
min_held_out: `evaluation.val_fraction` is the share used) at the end of each epoch, or on the training batches when
nothing is held out; `evaluation` says which and how many samples. Regression loss is the MSE of the standardised
target; r2 and rmse (in the target's units) are regression's own figures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from schemas.data_objects import DataRead
from schemas.gpus import load_gpus
from schemas.model_presets import GptPreset, MlpPreset
from schemas.run_metrics import RunWarning

METRICS_FILE = "metrics.json"
METRICS_VERSION = 1


def flops_per_sample(preset: MlpPreset | GptPreset, parameter_count: int) -> float:
    """Training FLOPs (forward + backward) for one sample.

    GPT: PaLM's 6N + 12*L*H*Q*T per token (N non-embedding parameters), times T tokens per sequence.
    MLP: 6 x parameters per row.
    """
    if isinstance(preset, GptPreset):
        per_token = 6 * preset.non_embedding_parameter_count() + 12 * preset.n_layer * preset.d_model * preset.seq_len
        return float(per_token * preset.seq_len)
    return 6.0 * parameter_count


def peak_flops(device_name: str, precision: str) -> float | None:
    """Dense peak FLOP/s of one GPU in this precision, or None when the GPU or the precision is unknown.

    The peaks are the planner's (schemas/data/gpus.json, loaded by schemas.gpus). torch names GPUs like
    "NVIDIA H100 80GB HBM3" or "Tesla T4"; a GPU kind matches when its model token (H100, T4, A100, ...) is one of
    the name's alphanumeric tokens (so L40S is not taken for L4).
    """
    tokens = set(re.findall(r"[A-Za-z0-9]+", device_name.upper()))
    for gpu in load_gpus().kinds.values():
        if gpu.model.upper() in tokens:
            value = gpu.peak_tflops.get(precision)
            return float(value) * 1e12 if value else None
    return None


def model_flops_utilisation(
    samples_per_second: float, flops_per_item: float, peak_per_device: float | None, devices: int
) -> float | None:
    """Achieved model FLOP/s over the peak of all devices; None without a known peak (CPU, unknown GPU)."""
    if not peak_per_device or devices < 1:
        return None
    return samples_per_second * flops_per_item / (peak_per_device * devices)


@dataclass(frozen=True)
class EpochResult:
    epoch: int
    loss: float
    accuracy: float | None
    perplexity: float | None
    r2: float | None = None
    """Regression: coefficient of determination of the held-out targets (1 - SSE / their sum of squares about
    their mean)."""
    rmse: float | None = None
    """Regression: root mean squared error in the target's own units."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "epoch": self.epoch,
            "loss": self.loss,
            "accuracy": self.accuracy,
            "perplexity": self.perplexity,
        }
        if self.r2 is not None or self.rmse is not None:
            out |= {"r2": self.r2, "rmse": self.rmse}
        return out


@dataclass(frozen=True)
class Evaluation:
    """What the reported figures were measured on; the same for every epoch and every rank."""

    split: str
    """"held-out" (rows chosen by position, never trained on) or "training" (nothing held out: the figures come
    from the epoch's training batches)."""
    samples: int
    """Held-out samples (rows, or text windows) scored at each epoch's end; with split "training", the training
    samples of one epoch."""
    train_samples: int
    """Samples in the training split."""
    val_fraction: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "split": self.split,
            "samples": self.samples,
            "train_samples": self.train_samples,
            "val_fraction": self.val_fraction,
        }


def metrics_document(
    *,
    task: str,
    model: str,
    strategy: str,
    world_size: int,
    steps: int,
    epochs: list[EpochResult],
    samples_per_second: float,
    tokens_per_second: float | None,
    wall_time_seconds: float,
    mfu: float | None,
    evaluation: Evaluation | None = None,
    batch: dict[str, int] | None = None,
    kept_epoch: int | None = None,
    early_stopping: dict[str, Any] | None = None,
    warnings: list[RunWarning] | None = None,
    data: DataRead | None = None,
    step_seconds: float | None = None,
    peak_memory_bytes: int | None = None,
    compile_seconds: float | None = None,
    warmup: dict[str, Any] | None = None,
    resumed_from_step: int = 0,
    work_lost: tuple[int, float] = (0, 0.0),
) -> dict[str, Any]:
    """metrics.json; `final` repeats the figures of the epoch whose weights were saved (kept_epoch, 1-based: the
        best held-out loss under early stopping; by default the last); `batch` says how each optimizer step's global
        batch was split (micro-batch x processes x accumulation steps); `step_seconds` (training seconds per optimizer
        step) and `peak_memory_bytes` (the most one process held: CUDA's peak allocation, or the process's peak resident
        memory on CPU) are what the planner learns from (schemas/measurement.py); `compile_seconds` is the wall time of
    the first step with torch.compile'd blocks, compilation included (that step is left out of samples_per_second
    and step_seconds) (None when nothing was compiled, trainer/speed.py);
    `warmup` sets this invocation's first steps apart from the steady ones ({"steps", "seconds", "steady_steps",
    "steady_seconds", "steady_samples_per_second"}; None when the run had no more steps than that);
    `resumed_from_step` is the step of the checkpoint this invocation resumed from, 0 when it started fresh;
    `work_lost_steps` and `work_lost_seconds` (only on a resumed run) are the steps trained past the checkpoints the
    run's attempts resumed from, lost to their stops, and the wall seconds those took."""
    kept = next((e for e in epochs if e.epoch == kept_epoch), None) or (epochs[-1] if epochs else None)
    final = kept.to_dict() if kept else {"loss": None, "accuracy": None, "perplexity": None}
    final.pop("epoch", None)
    return {
        "schema_version": METRICS_VERSION,
        "task": task,
        "model": model,
        "strategy": strategy,
        "world_size": world_size,
        "steps": steps,
        "resumed_from_step": resumed_from_step,
        **({"work_lost_steps": work_lost[0], "work_lost_seconds": work_lost[1]} if resumed_from_step else {}),
        "final": final,
        "epochs": [e.to_dict() for e in epochs],
        "evaluation": evaluation.to_dict() if evaluation else None,
        "samples_per_second": samples_per_second,
        "tokens_per_second": tokens_per_second,
        "wall_time_seconds": wall_time_seconds,
        "mfu": mfu,
        "step_seconds": step_seconds,
        "peak_memory_bytes": peak_memory_bytes,
        "compile_seconds": compile_seconds,
        "warmup": warmup,
        **({"batch": batch} if batch else {}),
        **({"early_stopping": early_stopping} if early_stopping else {}),
        "warnings": [w.to_dict() for w in warnings or []],
        **({"data": data.to_dict()} if data else {}),
    }
