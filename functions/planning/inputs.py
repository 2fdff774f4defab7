"""PlanInput: exactly what the planner needs to know about a training request, and how to get it from one.

The planner does not import the TrainingRequest schema: `plan_input_from_request` reads the request's attributes
by name, so the dispatcher calls `plan_request(plan_input_from_request(request))`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from functions.planning.errors import PlanInputError
from schemas.errors import SchemaError
from schemas.gpus import parse_capability
from schemas.trainer_flags import HPARAMS
from schemas.vocabulary import (
    FLEX_START_POLICIES,
    MODEL_PARALLELISM,
    PRECISION_POLICIES,
    SPOT_POLICIES,
    TASKS,
    parse_prefer,
)


@dataclass(frozen=True)
class PlanInput:
    """One request to plan. Zero / empty / None means "not set" everywhere, as in the TrainingRequest."""

    task: str
    """One of vocabulary.TASKS."""
    preset: str
    """Model preset name (schemas/data/model_presets.json); "" with `parameters` set plans a generic model."""
    dataset_bytes: int
    """Total bytes of the dataset's data objects."""
    epochs: int = 1
    batch_size: int = 64
    """Global batch: samples (rows, or sequences of seq_len tokens) per optimizer step over every process."""
    dataset_objects: int = 0
    max_steps: int = 0
    """Cap on optimizer steps; 0 = run every epoch."""
    min_steps: int = 0
    """Tabular, built-in trainer: whole epochs are added until the run takes this many optimizer steps (its
    --hparam min_steps, schemas/trainer_flags.py); 0 = exactly `epochs`."""
    parameters: int | None = None
    """Overrides the preset's parameter count (what-if planning; `--params`)."""
    tokens: int | None = None
    """causal-lm: tokens per epoch; None = dataset_bytes x tokens_per_byte (byte-level vocabulary)."""
    seq_len: int | None = None
    """causal-lm: sequence length; None = the preset's."""
    n_features: int | None = None
    """Tabular: feature columns; None = the planning default (assumptions.json)."""
    n_outputs: int | None = None
    """Tabular: classes (classification) or 1 (regression); None = the planning default."""
    deadline: datetime | None = None
    """The run must end by then (timezone-aware); None = no deadline."""
    budget_usd: float = 0.0
    """0 = no budget."""
    regions: tuple[str, ...] = ()
    """Allowed regions; empty = any."""
    gpu_allowlist: tuple[str, ...] = ()
    """Allowed accelerator types; empty = any, CPU-only included. A non-empty list excludes CPU-only machines."""
    max_gpus: int = 0
    """Cap on GPUs in total; 0 = no cap."""
    spot: str = "allowed"
    """One of vocabulary.SPOT_POLICIES."""
    checkpointing: bool = True
    """Whether the trainer checkpoints (needed to run on Spot)."""
    precision: str = "auto"
    """One of vocabulary.PRECISION_POLICIES: auto (16-bit mixed precision where the GPU has it) or fp32."""
    flex_start: str = "never"
    """One of vocabulary.FLEX_START_POLICIES: whether an on-demand plan may wait for capacity (FLEX_START)."""
    reservation: str = ""
    """A reservation (by name, one of the planner's configured reservations) the plan must run on; "" = none named
    (a configured reservation the request can use is still preferred)."""
    machine_type: str = ""
    """Pinned machine type; "" = free."""
    accelerator_count: int = 0
    """Pinned GPUs per machine; 0 = free."""
    replica_count: int = 0
    """Pinned machines (nodes); 0 = free."""
    tensor_parallel: int = 0
    """Pinned tensor-parallel degree (constraints.tensor_parallel; 1 = none); 0 = free."""
    pipeline_parallel: int = 0
    """Pinned pipeline stages (constraints.pipeline_parallel; 1 = none); 0 = free."""
    samples: int | None = None
    """Samples per epoch, when the dataset's size does not say it (an own trainer's workload.samples_per_epoch)."""
    layers: int | None = None
    """Transformer blocks of code Landfall did not write (workload.layers); None = from the preset or the count."""
    hidden_size: int | None = None
    """Its width (workload.hidden_size)."""
    memory_gib_per_gpu: float = 0.0
    """Measured GiB one process needs (workload.memory_gib_per_gpu); 0 = the memory model decides."""
    step_seconds: float = 0.0
    """Measured seconds per optimizer step of the global batch on one GPU (workload.step_seconds); 0 = modelled."""
    flops_per_sample: float = 0.0
    """Declared training FLOPs of one sample, forward and backward (workload.flops_per_sample); 0 = modelled."""
    activation_gib_per_sample: float = 0.0
    """Declared activation GiB of one sample at the run's precision (workload.activation_gib_per_sample); 0 =
    modelled."""
    trainable_parameters: int | None = None
    """Parameters that train (workload.trainable_parameters: adapters, LoRA); None = all of them."""
    basis: str = ""
    """How an own trainer's size was given (one of the request rules' WORKLOAD_WAYS, shortened); "" = built-in."""
    image_uri: str = ""
    """The team's container image (trainer.image_uri); "" = Landfall's trainer images (built-in, script, package)."""
    gpu_capabilities: tuple[str, ...] = ()
    """The compute capabilities ("X.Y") the team's image carries kernels for (trainer.gpu_capabilities); () = assumed
    from the CUDA line its reference names (functions/planning/images.py)."""
    parallelism: tuple[str, ...] = MODEL_PARALLELISM
    """The model-parallel layouts the trainer runs (vocabulary.MODEL_PARALLELISM): the built-in trainer runs both; a
    team's code what its workload.parallelism lists (none when it lists nothing)."""
    prefer: str = ""
    """The objective (constraints.prefer): "cheapest", "fastest", a value of time in US dollars per hour ("25");
    "" = the default value of time (assumptions.json objective)."""

    def __post_init__(self) -> None:
        unknown = [kind for kind in self.parallelism if kind not in MODEL_PARALLELISM]
        if unknown:
            raise PlanInputError(
                f"parallelism {', '.join(map(repr, unknown))} is not one of {', '.join(MODEL_PARALLELISM)}"
            )
        if self.task not in TASKS:
            raise PlanInputError(f"task {self.task!r} is not one of {', '.join(TASKS)}")
        if not self.preset and self.parameters is None:
            raise PlanInputError("name a model preset or give a parameter count (--params)")
        for name in ("epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise PlanInputError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in (
            "dataset_bytes",
            "dataset_objects",
            "max_steps",
            "min_steps",
            "max_gpus",
            "accelerator_count",
            "replica_count",
            "tensor_parallel",
            "pipeline_parallel",
        ):
            if getattr(self, name) < 0:
                raise PlanInputError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in (
            "parameters",
            "tokens",
            "seq_len",
            "n_features",
            "n_outputs",
            "samples",
            "layers",
            "hidden_size",
            "trainable_parameters",
        ):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise PlanInputError(f"{name} must be >= 1 when given, got {value}")
        for name in ("flops_per_sample", "activation_gib_per_sample", "memory_gib_per_gpu", "step_seconds"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise PlanInputError(f"{name} must be a finite number >= 0 (0 = modelled), got {value}")
        if self.trainable_parameters and self.parameters and self.trainable_parameters > self.parameters:
            raise PlanInputError(
                f"trainable_parameters ({self.trainable_parameters:,}) is more than parameters "
                f"({self.parameters:,}): it counts the part of the model that trains; give at most parameters"
            )
        if self.budget_usd < 0:
            raise PlanInputError(f"budget_usd must be >= 0 (0 = no budget), got {self.budget_usd}")
        if self.spot not in SPOT_POLICIES:
            raise PlanInputError(f"spot policy {self.spot!r} is not one of {', '.join(SPOT_POLICIES)}")
        if self.flex_start not in FLEX_START_POLICIES:
            raise PlanInputError(
                f"flex_start policy {self.flex_start!r} is not one of {', '.join(FLEX_START_POLICIES)}"
            )
        if self.precision not in PRECISION_POLICIES:
            raise PlanInputError(f"precision {self.precision!r} is not one of {', '.join(PRECISION_POLICIES)}")
        for value in self.gpu_capabilities:
            try:
                parse_capability(value, "gpu_capabilities")
            except SchemaError as exc:
                raise PlanInputError(str(exc)) from exc
        if self.gpu_capabilities and not self.image_uri:
            raise PlanInputError(
                "gpu_capabilities describe a team's container image: give it with image_uri (Landfall's own images "
                "declare theirs in deploy/topology.toml)"
            )
        try:
            parse_prefer(self.prefer)
        except ValueError as exc:
            raise PlanInputError(f"prefer: {exc}") from exc
        if self.deadline is not None and self.deadline.tzinfo is None:
            raise PlanInputError("deadline must carry a timezone (RFC 3339, e.g. 2026-12-01T00:00:00Z)")


def parse_deadline(text: str) -> datetime | None:
    """RFC 3339 text to an aware datetime; "" means no deadline."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise PlanInputError(f"deadline {text!r} is not RFC 3339 (e.g. 2026-12-01T00:00:00Z)") from exc
    if value.tzinfo is None:
        raise PlanInputError(f"deadline {text!r} has no timezone; add Z or an offset")
    return value.astimezone(UTC)


_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}


def parse_count(text: str | int | float) -> int:
    """A parameter or token count: 124000000, 1.3e9, 124M, 1.3B, 7b, 70B."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        value = float(text)
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmbgt]?)\s*", str(text).lower())
        if not match:
            raise PlanInputError(f"{text!r} is not a count; write e.g. 124M, 1.3B, 7e9 or 70000000000")
        value = float(match.group(1)) * _SUFFIX[match.group(2)]
    if value < 1:
        raise PlanInputError(f"count must be >= 1, got {text!r}")
    return round(value)


def _get(obj: Any, dotted: str, default: Any = None) -> Any:
    for part in dotted.split("."):
        obj = obj.get(part, default) if isinstance(obj, dict) else getattr(obj, part, default)
        if obj is default:
            return default
    return obj


NOMINAL_PARAMETERS = 1_000_000
"""The parameter count planned for own code that pins its machine and says nothing else of its size: the pinned
shape decides, time and cost are only as good as this guess (the plan's workload says so)."""


def _own_workload(request: Any) -> dict[str, Any]:
    """The PlanInput fields for a team's own trainer (request.trainer set), from model.preset, workload.parameters,
    workload's measured memory and step time, or a pinned machine, checked in that order."""
    preset = _get(request, "model.preset", "") or ""
    w = lambda name: _get(request, f"workload.{name}", 0) or 0  # noqa: E731
    parameters, layers, seq_len = int(w("parameters")), int(w("layers")), int(w("seq_len"))
    memory, step = float(w("memory_gib_per_gpu")), float(w("step_seconds"))
    task = _get(request, "task", "") or ""
    if not task:
        shaped_like_transformer = preset.startswith("gpt") or bool(layers or seq_len or w("tokens_per_epoch"))
        task = "causal-lm" if shaped_like_transformer else "tabular-regression"
    if preset:
        basis = f"model.preset {preset} (its shape)"
    elif parameters:
        basis = "workload.parameters"
    elif memory and step:
        basis = "measured workload.memory_gib_per_gpu and step_seconds"
    elif memory:
        time = "workload.flops_per_sample" if w("flops_per_sample") else "a nominal 1M-parameter model"
        basis = f"measured workload.memory_gib_per_gpu (time modelled from {time})"
    else:
        basis = "the pinned machine (size unknown: time and cost assume a nominal 1M-parameter model)"
    if not preset and not parameters:
        parameters = NOMINAL_PARAMETERS
    return {
        "task": task,
        "preset": preset,
        "parameters": parameters or None,
        "seq_len": seq_len or None,
        "layers": layers or None,
        "hidden_size": int(w("hidden_size")) or None,
        "samples": int(w("samples_per_epoch")) or None,
        "tokens": int(w("tokens_per_epoch")) or None,
        "memory_gib_per_gpu": memory,
        "step_seconds": step if memory and step else 0.0,
        "flops_per_sample": float(w("flops_per_sample")),
        "activation_gib_per_sample": float(w("activation_gib_per_sample")),
        "trainable_parameters": int(w("trainable_parameters")) or None,
        "basis": basis,
        "parallelism": tuple(_get(request, "workload.parallelism", ()) or ()),
    }


def _min_steps(request: Any) -> int:
    """The built-in trainer's floor on a tabular run's optimizer steps: the request's --hparam min_steps, else the
    trainer's default (a team's code and causal-lm runs have none)."""
    task = _get(request, "task", "") or ""
    if not task.startswith("tabular"):
        return 0
    flag = HPARAMS["min_steps"]
    raw = (_get(request, "hyperparameters.extra", {}) or {}).get("min_steps")
    try:
        value = flag.parse(str(raw)) if raw is not None else flag.default
    except ValueError:
        return 0  # the dispatcher refuses the request (extra_problems); planning goes on without the floor
    return max(0, int(value))


def plan_input_from_request(request: Any) -> PlanInput:
    """Read a TrainingRequest (or a dict of the same JSON shape) into a PlanInput, attribute by attribute."""
    own = (
        _get(request, "trainer.script", "")
        or _get(request, "trainer.package_uris", ())
        or _get(request, "trainer.image_uri", "")
    )
    sized = (
        _own_workload(request)
        if own
        else {
            "task": _get(request, "task", ""),
            "preset": _get(request, "model.preset", ""),
            "min_steps": _min_steps(request),
        }
    )
    return PlanInput(
        **sized,
        dataset_bytes=int(_get(request, "dataset.total_bytes", 0) or 0),
        dataset_objects=int(_get(request, "dataset.object_count", 0) or 0),
        epochs=int(_get(request, "hyperparameters.epochs", 1) or 1),
        batch_size=int(_get(request, "hyperparameters.batch_size", 64) or 64),
        max_steps=int(_get(request, "hyperparameters.max_steps", 0) or 0),
        deadline=parse_deadline(_get(request, "constraints.deadline", "") or ""),
        budget_usd=float(_get(request, "constraints.budget_usd", 0.0) or 0.0),
        regions=tuple(_get(request, "constraints.regions", ()) or ()),
        gpu_allowlist=tuple(_get(request, "constraints.gpu_allowlist", ()) or ()),
        max_gpus=int(_get(request, "constraints.max_gpus", 0) or 0),
        spot=_get(request, "constraints.spot", "allowed") or "allowed",
        flex_start=_get(request, "constraints.flex_start", "never") or "never",
        reservation=_get(request, "constraints.reservation", "") or "",
        machine_type=_get(request, "constraints.machine_type", "") or "",
        accelerator_count=int(_get(request, "constraints.accelerator_count", 0) or 0),
        replica_count=int(_get(request, "constraints.replica_count", 0) or 0),
        tensor_parallel=int(_get(request, "constraints.tensor_parallel", 0) or 0),
        pipeline_parallel=int(_get(request, "constraints.pipeline_parallel", 0) or 0),
        image_uri=_get(request, "trainer.image_uri", "") or "",
        gpu_capabilities=tuple(_get(request, "trainer.gpu_capabilities", ()) or ()),
        prefer=str(_get(request, "constraints.prefer", "") or ""),
    )
