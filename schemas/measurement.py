"""Measurement: what runs of one workload measured on one machine shape and image, one document per (workload,
machine shape, image) in the Firestore collection `measurements` (topology firestore.measurements_collection),
keyed by `measurement_id_for(...)`.

Every finished run (the listener, on SUCCEEDED) and every canary writes its figures here: step time, peak memory,
samples per second and start-up time, the newest replacing the older ones on the same shape, and appends how far its
plan's estimate was from its actual duration (the last MAX_ESTIMATES are kept). The dispatcher reads a request's
documents with one equality query on `workload` and gives them to the planner (functions/planning/measured.py),
which plans from the measured figures over its model; `landfall plan` shows the past estimate errors.

The workload key (`workload_key`) names the same training work whatever the dataset's size: the task, the model (or
the team's code and its declared size), the global batch and the precision. Two requests with the same key take the
same time per step on the same machine; their step counts differ with their data.

Written as `Measurement.to_document()`, read with `parse_measurement`; `schemas/examples/measurement.json`. Both hold
each figure to its rule (schemas/run_metrics.py FIGURES: finite, in its plausible range): a Measurement with a
figure outside it cannot be made, so none is written, and a stored one (written before the rules) does not read.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from schemas.errors import SchemaError
from schemas.fields import Reader
from schemas.run_metrics import figure_problem

SCHEMA_VERSION = 1
SOURCES = ("canary", "run")
"""Where figures came from: a canary job before a long run, or a finished run."""
MAX_ESTIMATES = 20
"""Estimate checks kept per document (the newest), so the document stays small (docs/records.md)."""
MAX_FLOPS_PER_SAMPLE = 1e21
"""Above any model a run trains in a step (a 70B model on a 128k-token sample is about 5e16)."""
MEASUREMENTS_PER_REQUEST = 50
"""The most documents the dispatcher reads for one request (one query, bounded: its CPU budget)."""
LANDFALL_IMAGE = "landfall-trainer"
"""The image field for Landfall's own trainer images (built-in, script and package trainers: the build follows the
GPU, which the shape names)."""
FIGURE_RULES = {
    "step_seconds": "step_seconds",
    "peak_memory_gib": "peak_memory_gib",
    "samples_per_second": "samples_per_second",
    "startup_seconds": "startup_seconds",
    "steps": "steps",
    "modelled_steps": "steps",
    "model_step_seconds": "step_seconds",
}
"""A measurement's figures, each with the rule it is held to (schemas/run_metrics.py FIGURES)."""
LAYOUT_FIELDS = ("tensor_parallel", "pipeline_parallel")
"""The plan's model-parallel layout the figures were measured under (schemas/plan.py): each a whole number >= 1,
stored only when above 1."""


def _get(obj: Any, dotted: str, default: Any = None) -> Any:
    for part in dotted.split("."):
        obj = obj.get(part, default) if isinstance(obj, Mapping) else getattr(obj, part, default)
        if obj is default:
            return default
    return obj


SIZE_FIELDS = (
    "parameters",
    "layers",
    "hidden_size",
    "seq_len",
    "memory_gib_per_gpu",
    "step_seconds",
    "flops_per_sample",
    "activation_gib_per_sample",
    "trainable_parameters",
)
"""The workload's figures that make it another workload (a LoRA is not its base model's full fine-tune); each counts
in the key only when set, so a key made before a figure existed does not change."""


def _workload_fields(request: Any) -> dict[str, Any]:
    trainer = (
        _get(request, "trainer.image_uri", "")
        or _get(request, "trainer.script", "")
        or ",".join(_get(request, "trainer.package_uris", ()) or ())
    )
    workload = _get(request, "workload", {}) or {}
    sizes = {k: _get(workload, k, 0) or 0 for k in SIZE_FIELDS}
    return {
        "task": _get(request, "task", "") or "",
        "preset": _get(request, "model.preset", "") or "",
        "trainer": trainer,
        "batch_size": int(_get(request, "hyperparameters.batch_size", 64) or 64),
        "precision": _get(request, "hyperparameters.extra.precision", "") or "",
        **{k: v for k, v in sizes.items() if v},
    }


def workload_key(request: Any) -> str:
    """The key of a TrainingRequest's (or its dict's) training work: `wl-` and 20 hex digits of its fields' hash."""
    text = json.dumps(_workload_fields(request), sort_keys=True, separators=(",", ":"))
    return "wl-" + hashlib.sha256(text.encode()).hexdigest()[:20]


def workload_label(request: Any) -> str:
    """The workload for a person: task, model or code, global batch."""
    f = _workload_fields(request)
    what = f["preset"] or f["trainer"] or "own code"
    return f"{f['task'] or 'own code'} {what}, batch {f['batch_size']}"[:400]


def image_of(request: Any) -> str:
    """The image a request's jobs run: the team's container, else Landfall's trainer images."""
    return str(_get(request, "trainer.image_uri", "") or LANDFALL_IMAGE)


def measurement_id_for(workload: str, machine_type: str, accelerator_count: int, nodes: int, image: str) -> str:
    """The document id of one (workload, machine shape, image): readable parts and a hash of the image."""
    digest = hashlib.sha256(image.encode()).hexdigest()[:12]
    return f"{workload}-{machine_type}-{accelerator_count}x{nodes}-{digest}"


def estimate_error_text(error: float) -> str:
    """An estimate's error ((estimate - actual) / actual) in words, so its direction cannot be misread: "estimate
    743 % long" (the run took far less time than planned), "estimate 5 % short" (it took longer), "estimate on
    time" within half a percent."""
    if abs(error) < 0.005:
        return "estimate on time"
    return f"estimate {abs(error):.0%} {'long' if error > 0 else 'short'}"


@dataclass(frozen=True)
class EstimateCheck:
    """One finished run's plan estimate beside its actual duration."""

    run_id: str
    estimated_seconds: float
    """The plan's estimated_hours x 3600."""
    actual_seconds: float
    """The run's timings.run_seconds (the job's end - its start, as Vertex reports them)."""
    from_measured: bool
    """The plan's step time came from measured figures (else from the model alone)."""
    at: str
    """RFC 3339: when the run ended."""

    @property
    def error(self) -> float:
        """(estimate - actual) / actual: +0.2 = the estimate was 20 % long."""
        return (self.estimated_seconds - self.actual_seconds) / self.actual_seconds if self.actual_seconds else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "estimated_seconds": self.estimated_seconds,
            "actual_seconds": self.actual_seconds,
            "from_measured": self.from_measured,
            "at": self.at,
        }


@dataclass(frozen=True)
class Measurement:
    workload: str
    """workload_key(request)."""
    workload_label: str
    machine_type: str
    accelerator_type: str
    """"" on a CPU-only machine."""
    accelerator_count: int
    nodes: int
    image: str
    """The team's image URI, or LANDFALL_IMAGE."""
    run_id: str
    """The run whose figures these are (the newest)."""
    source: str
    """One of SOURCES."""
    measured_at: str
    """RFC 3339."""
    step_seconds: float = 0.0
    """Seconds per optimizer step of the global batch; 0 = not measured."""
    peak_memory_gib: float = 0.0
    """The most one process held (GiB); 0 = not measured."""
    samples_per_second: float = 0.0
    startup_seconds: float = 0.0
    """Job seconds not spent in training steps (machines, image, data, set-up, checkpoints): the run's duration less
    its steps x step time; a canary's time to its first step. 0 = not measured."""
    micro_batch: int = 0
    global_batch: int = 0
    strategy: str = ""
    tensor_parallel: int = 1
    """The plan's tensor-parallel degree the figures were measured under (1: none); stored only when above 1, so a
    document written before layouts reads back the same."""
    pipeline_parallel: int = 1
    """The plan's pipeline stages the figures were measured under (1: none); stored only when above 1."""
    steps: int = 0
    """Optimizer steps the run took (its metrics.json `steps`); 0 = not known (a canary)."""
    modelled_steps: int = 0
    """The steps the planner's model gives the same request (before any measurement); 0 = not known."""
    model_step_seconds: float = 0.0
    """The planner's model's step for this work on this shape and strategy, before any measurement: beside
    step_seconds, how far the model is off for such work on this GPU kind (other workloads learn from it); 0 = not
    known."""
    flops_per_sample: float = 0.0
    """Training FLOPs per sample of this work, as the planner counts them; 0 = not known."""
    family: str = ""
    """The work's family as the planner names it (transformer, mlp, ...); "" = not known."""
    estimates: tuple[EstimateCheck, ...] = ()
    """The newest MAX_ESTIMATES finished runs' estimate checks on this shape, oldest first."""
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise SchemaError(f"measurement.source {self.source!r} is not one of {', '.join(SOURCES)}")
        for name in LAYOUT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SchemaError(
                    f"must be a whole number >= 1 (1 = none); got {value!r:.40}",
                    field=f"measurement.{name}",
                )
        for name, rule in FIGURE_RULES.items():
            value = getattr(self, name)
            problem = figure_problem(rule, value)
            if problem:
                raise SchemaError(f"{problem}; got {value!r:.40}", field=f"measurement.{name}")
        if not (math.isfinite(self.flops_per_sample) and 0 <= self.flops_per_sample < MAX_FLOPS_PER_SAMPLE):
            raise SchemaError(
                f"must be a finite number in [0, {MAX_FLOPS_PER_SAMPLE:g}); got {self.flops_per_sample!r:.40}",
                field="measurement.flops_per_sample",
            )

    @property
    def measurement_id(self) -> str:
        return measurement_id_for(self.workload, self.machine_type, self.accelerator_count, self.nodes, self.image)

    def merged(self, newer: Measurement) -> Measurement:
        """This document after `newer`'s run: its figures where it measured them, its estimate checks appended (a
        run already checked is not counted twice)."""
        seen = {e.run_id for e in self.estimates}
        checks = (*self.estimates, *(e for e in newer.estimates if e.run_id not in seen))[-MAX_ESTIMATES:]
        if newer.measured_at < self.measured_at:  # an older run's figures, delivered late: keep the newest
            return replace(self, estimates=checks)
        keep = {
            name: getattr(newer, name) or getattr(self, name)
            for name in (
                "step_seconds",
                "peak_memory_gib",
                "samples_per_second",
                "startup_seconds",
                "micro_batch",
                "steps",
                "modelled_steps",
            )
        }
        if not newer.step_seconds:  # the model's step and the layout stay beside the step they were measured with
            keep |= {k: getattr(self, k) for k in ("model_step_seconds", "flops_per_sample", "family", *LAYOUT_FIELDS)}
        return replace(newer, **keep, estimates=checks, workload_label=newer.workload_label or self.workload_label)

    def to_document(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "workload": self.workload,
            "workload_label": self.workload_label,
            "machine_type": self.machine_type,
            "accelerator_type": self.accelerator_type,
            "accelerator_count": self.accelerator_count,
            "nodes": self.nodes,
            "image": self.image,
            "run_id": self.run_id,
            "source": self.source,
            "measured_at": self.measured_at,
            "step_seconds": self.step_seconds,
            "peak_memory_gib": self.peak_memory_gib,
            "samples_per_second": self.samples_per_second,
            "startup_seconds": self.startup_seconds,
            "micro_batch": self.micro_batch,
            "global_batch": self.global_batch,
            "strategy": self.strategy,
            **{name: getattr(self, name) for name in LAYOUT_FIELDS if getattr(self, name) > 1},
            "steps": self.steps,
            "modelled_steps": self.modelled_steps,
            **({"model_step_seconds": self.model_step_seconds} if self.model_step_seconds else {}),
            **({"flops_per_sample": self.flops_per_sample} if self.flops_per_sample else {}),
            **({"family": self.family} if self.family else {}),
            "estimates": [e.to_dict() for e in self.estimates],
        }


def _number(r: Reader, name: str) -> float:
    """A finite number >= 0 (each figure is then held to its rule by Measurement)."""
    return r.number(name, 0.0, minimum=0)


def parse_measurement(data: object) -> Measurement:
    """Read a stored measurement document; raises SchemaError naming the field that does not fit."""
    r = Reader(data, "measurement")
    listed = r.data.get("estimates", [])
    if not isinstance(listed, list):
        raise SchemaError(f"measurement.estimates: expected a list, got {listed!r}", field="measurement.estimates")
    checks = []
    for i, item in enumerate(listed[-MAX_ESTIMATES:]):
        e = Reader(item, f"measurement.estimates[{i}]")
        checks.append(
            EstimateCheck(
                run_id=e.string("run_id", max_len=200),
                estimated_seconds=_number(e, "estimated_seconds"),
                actual_seconds=_number(e, "actual_seconds"),
                from_measured=e.boolean("from_measured", False),
                at=e.string("at", "", max_len=64),
            )
        )
    return Measurement(
        workload=r.string("workload", max_len=64),
        workload_label=r.string("workload_label", "", max_len=400),
        machine_type=r.string("machine_type", max_len=64),
        accelerator_type=r.string("accelerator_type", "", max_len=64),
        accelerator_count=r.integer("accelerator_count", 0, minimum=0),
        nodes=r.integer("nodes", 1, minimum=1),
        image=r.string("image", max_len=400),
        run_id=r.string("run_id", max_len=200),
        source=r.string("source", choices=SOURCES),
        measured_at=r.string("measured_at", max_len=64),
        step_seconds=_number(r, "step_seconds"),
        peak_memory_gib=_number(r, "peak_memory_gib"),
        samples_per_second=_number(r, "samples_per_second"),
        startup_seconds=_number(r, "startup_seconds"),
        micro_batch=r.integer("micro_batch", 0, minimum=0),
        global_batch=r.integer("global_batch", 0, minimum=0),
        strategy=r.string("strategy", "", max_len=32),
        tensor_parallel=r.integer("tensor_parallel", 1, minimum=1),
        pipeline_parallel=r.integer("pipeline_parallel", 1, minimum=1),
        steps=r.integer("steps", 0, minimum=0),
        modelled_steps=r.integer("modelled_steps", 0, minimum=0),
        model_step_seconds=_number(r, "model_step_seconds"),
        flops_per_sample=_number(r, "flops_per_sample"),
        family=r.string("family", "", max_len=32),
        estimates=tuple(checks),
        schema_version=r.integer("schema_version", SCHEMA_VERSION),
    )


__all__ = [
    "LANDFALL_IMAGE",
    "MAX_ESTIMATES",
    "MEASUREMENTS_PER_REQUEST",
    "SOURCES",
    "EstimateCheck",
    "Measurement",
    "image_of",
    "measurement_id_for",
    "parse_measurement",
    "workload_key",
    "workload_label",
]
