"""MeasuredFigures: what a canary or a finished run measured, as the planner takes it.

The dispatcher reads a request's measurements (Firestore collection `measurements`, schemas/measurement.py) and
passes them to `plan_request(..., measured=...)`; a canary's figures go the same way (re-planning after a canary).
The planner then prefers measured figures over its model: see functions/planning/calibration.py.

This module is the planner's side of the contract: plain typed values, no Firestore, no schema import, so the planner
stays pure and its tests need no stored records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from functions.planning.errors import PlanInputError

MEASUREMENT_SOURCES = ("canary", "run", "startup", "similar")
"""Where a measurement came from: a canary job before a long run, a finished run, ("startup") a start-up another
workload's run measured on the same machine shape and image: a property of the shape, not of the work, so it stands
for the start-up there until this workload measures its own (its step figures are not taken); or ("similar") another
workload's measured step beside the model's step for that work: how far the model is off for a GPU kind, which
corrects this workload's step on that kind, weighted by how alike the two works are (calibration.py)."""
STARTUP_SOURCE = "startup"
SIMILAR_SOURCE = "similar"


@dataclass(frozen=True)
class MeasuredFigures:
    """One run's (or canary's) measured figures for one workload on one machine shape and image."""

    workload: str
    """The workload key (schemas/measurement.py workload_key): the same training work, whatever its dataset size."""
    machine_type: str
    """The Vertex machine type it ran on (e.g. a2-highgpu-1g, n2-standard-8)."""
    accelerator_type: str = ""
    """The Vertex accelerator type (NVIDIA_TESLA_A100...); "" on a CPU-only machine."""
    accelerator_count: int = 0
    """GPUs per machine; 0 on a CPU-only machine."""
    nodes: int = 1
    """Machines (replicas) the job ran on."""
    image: str = ""
    """The container image the job ran (its URI)."""
    micro_batch: int = 0
    """Samples per process per forward/backward pass; 0 = not known."""
    step_seconds: float = 0.0
    """Measured seconds per optimizer step (of the global batch, over every process); 0 = not measured."""
    peak_memory_gib: float = 0.0
    """Peak memory one process held (GPU memory, or the process's resident memory on a CPU-only machine); 0 = not
    measured."""
    samples_per_second: float = 0.0
    """Training throughput over every process; 0 = not measured."""
    startup_seconds: float = 0.0
    """From the job's submission to its first training step (machines, image pull, data, model set-up); 0 = not
    measured."""
    run_id: str = ""
    """The run (or the canary's run) that measured them."""
    source: str = "run"
    """One of MEASUREMENT_SOURCES: "canary" or "run" (a finished run)."""
    global_batch: int = 0
    """The global batch the step time is for; 0 = the request's (the workload key includes it)."""
    strategy: str = ""
    """The plan's strategy the figures were measured under (ddp, fsdp...); "" = not known (read as DDP)."""
    tensor_parallel: int = 1
    """The plan's tensor-parallel degree the figures were measured under (1: none, or not known)."""
    pipeline_parallel: int = 1
    """The plan's pipeline stages the figures were measured under (1: none, or not known)."""
    measured_at: str = ""
    """When (RFC 3339); the newest figure for a shape wins."""
    steps: int = 0
    """Optimizer steps the run took; 0 = not known (a canary)."""
    modelled_steps: int = 0
    """Optimizer steps the model gives the same run (its dataset size, epochs and batch); with `steps`, how far the
    model's step count is off for this workload's data (rows per byte, added epochs); 0 = not known."""
    model_step_seconds: float = 0.0
    """The model's step time for the measured work on the measured shape, strategy and layout, before any
    measurement: with step_seconds, how far the model is off for that work there; 0 = not known."""
    flops_per_sample: float = 0.0
    """The measured work's training FLOPs per sample, as the planner counts them; 0 = not known."""
    family: str = ""
    """The measured work's family as the planner names it (transformer, mlp, ...); "" = not known."""

    def __post_init__(self) -> None:
        if not self.workload:
            raise PlanInputError("measured figures name no workload key: give the workload they were measured for")
        if not self.machine_type:
            raise PlanInputError(f"measured figures of run {self.run_id!r} name no machine type")
        if self.source not in MEASUREMENT_SOURCES:
            raise PlanInputError(
                f"measured figures source {self.source!r} is not one of {', '.join(MEASUREMENT_SOURCES)}"
            )
        for name in ("accelerator_count", "micro_batch", "global_batch", "steps", "modelled_steps"):
            if getattr(self, name) < 0:
                raise PlanInputError(f"measured figures {name} must be >= 0, got {getattr(self, name)}")
        for name in ("nodes", "tensor_parallel", "pipeline_parallel"):
            if getattr(self, name) < 1:
                raise PlanInputError(f"measured figures {name} must be >= 1, got {getattr(self, name)}")
        for name in (
            "step_seconds",
            "peak_memory_gib",
            "samples_per_second",
            "startup_seconds",
            "model_step_seconds",
            "flops_per_sample",
        ):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise PlanInputError(f"measured figures {name} must be a finite number >= 0 (0 = not measured)")
        if bool(self.accelerator_type) != (self.accelerator_count > 0):
            raise PlanInputError(
                "measured figures give an accelerator type with no count, or a count with no type "
                f"({self.accelerator_type!r} x {self.accelerator_count}); CPU-only machines give neither"
            )

    @property
    def shape(self) -> tuple[str, int, int]:
        """(machine type, GPUs per machine, machines): the hardware the figures were measured on."""
        return (self.machine_type, self.accelerator_count, self.nodes)

    def describe(self) -> str:
        gpus = f" with {self.accelerator_count} x {self.accelerator_type}" if self.accelerator_count else ""
        nodes = f" x {self.nodes} machines" if self.nodes > 1 else ""
        layout = [f"tensor parallel {self.tensor_parallel}"] if self.tensor_parallel > 1 else []
        layout += [f"{self.pipeline_parallel} pipeline stages"] if self.pipeline_parallel > 1 else []
        under = f" under {' x '.join(layout)}" if layout else ""
        return f"{self.source} {self.run_id or '(unnamed)'} on {self.machine_type}{gpus}{nodes}{under}"


@dataclass(frozen=True)
class Calibration:
    """What the measured figures change, per configuration of the space."""

    step_scale: tuple[float, ...]
    """[config] measured / modelled step time (1.0 = the model)."""
    startup_seconds: tuple[float, ...]
    """[config] start-up seconds (the assumption where nothing was measured)."""
    measured_configs: frozenset[int]
    """Configurations a figure was measured on."""
    figures: tuple[tuple[int, MeasuredFigures, float], ...]
    """(config, figure, ratio) of every figure used."""
    steps_scale: float = 1.0
    """Measured / modelled optimizer steps of past runs of the workload (1.0 = the model's count)."""
    startups_learned: tuple[tuple[int, MeasuredFigures], ...] = ()
    """(config, figure) of each start-up another workload measured on the configuration's shape (source
    "startup")."""
    similar: tuple[tuple[int, float], ...] = ()
    """(config, weight) of each configuration whose step is the model's scaled by other workloads' measurements on
    its GPU kind (source "similar"): the summed likeness of the runs it rests on."""
    similar_figures: tuple[MeasuredFigures, ...] = ()
    """The other workloads' figures those scales rest on."""
