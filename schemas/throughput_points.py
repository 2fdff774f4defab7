"""Measured training throughput, loaded from data/throughput_points.json: what the planner's time model is fitted to.

One point is one measured run: a GPU kind, a model with its training FLOPs per sample, a micro-batch per GPU and a
precision, and the samples per second it reached, with the page it comes from. The planner
(functions/planning/throughput.py) turns the points into achieved MFU against the work per step; bench/estimates.py
plans each point's configuration and prints planned against measured. One file, one loader:
`load_throughput_points`. A malformed point fails with a SchemaError naming the point and field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from schemas.errors import SchemaError
from schemas.fields import Reader
from schemas.gpus import GpuSpec, load_gpus
from schemas.json_text import packaged_object
from schemas.vocabulary import PRECISIONS, STRATEGIES

POINTS_FILE = "throughput_points.json"
"""In schemas/data/."""
FIELDS = (
    "accelerator_type",
    "gpus",
    "processes",
    "model",
    "flops_per_sample",
    "micro_batch",
    "precision",
    "strategy",
    "samples_per_second",
    "reported_mfu",
    "source",
)


@dataclass(frozen=True)
class ThroughputPoint:
    """One measured run."""

    accelerator_type: str
    """The GPU kind, a key of gpus.json (Vertex accelerator_type)."""
    gpus: int
    processes: int
    """Training processes (one per GPU for the built-in trainer)."""
    model: str
    """The preset trained (model_presets.json)."""
    flops_per_sample: float
    """Training FLOPs (forward and backward) of one sample as the planner counts them."""
    micro_batch: int
    """Samples per GPU per micro-step."""
    precision: str
    strategy: str
    samples_per_second: float
    """All GPUs together."""
    reported_mfu: float | None
    """The MFU the source printed (its own FLOP count; for reading, not for fitting); None where it gave none."""
    source: str
    """The page and section the figures come from."""

    @property
    def work_per_step(self) -> float:
        """FLOPs one GPU runs per micro-step: the model's FLOPs per sample x the micro-batch."""
        return self.flops_per_sample * self.micro_batch

    def describe(self) -> str:
        """ "gpt-124m x8 ddp": which run, in a few words."""
        return f"{self.model} x{self.micro_batch} {self.strategy}"


@dataclass(frozen=True)
class ThroughputPoints:
    version: int
    """Bumped whenever a point is added or changed (part of the planner catalog's fingerprint)."""
    points: tuple[ThroughputPoint, ...]


def _point(r: Reader, kinds: Mapping[str, GpuSpec]) -> ThroughputPoint:
    r.only(FIELDS)
    kind = r.string("accelerator_type")
    if kind not in kinds:
        raise SchemaError(
            f"{kind!r} is not a GPU kind of gpus.json; expected one of {', '.join(kinds)}",
            field=f"{r.path}.accelerator_type",
        )
    gpus = r.integer("gpus", minimum=1)
    processes = r.integer("processes", minimum=1)
    if processes > gpus:
        raise SchemaError(
            f"expected at most one process per GPU ({gpus}), got {processes}", field=f"{r.path}.processes"
        )
    precision = r.string("precision", choices=PRECISIONS)
    if kinds[kind].peak_tflops.get(precision) is None:
        raise SchemaError(f"{kinds[kind].display} has no {precision} math", field=f"{r.path}.precision")
    mfu = r.data.get("reported_mfu")
    reported = None if mfu is None else r.number("reported_mfu", minimum=0.0)
    if reported is not None and not 0 < reported <= 1:
        raise SchemaError(f"expected a fraction in (0, 1] or null, got {mfu!r}", field=f"{r.path}.reported_mfu")
    return ThroughputPoint(
        accelerator_type=kind,
        gpus=gpus,
        processes=processes,
        model=r.string("model"),
        flops_per_sample=_positive(r, "flops_per_sample"),
        micro_batch=r.integer("micro_batch", minimum=1),
        precision=precision,
        strategy=r.string("strategy", choices=STRATEGIES),
        samples_per_second=_positive(r, "samples_per_second"),
        reported_mfu=reported,
        source=_source(r),
    )


def _positive(r: Reader, key: str) -> float:
    number = r.number(key)
    if number <= 0:
        raise SchemaError(f"expected a positive number, got {r.data[key]!r}", field=f"{r.path}.{key}")
    return number


def _source(r: Reader) -> str:
    source = r.string("source").strip()
    if not source:
        raise SchemaError("expected the page and section the figures come from, got an empty string", field=r.path)
    return source


def parse_throughput_points(raw: object, kinds: Mapping[str, GpuSpec] | None = None) -> ThroughputPoints:
    """Validate the contents of throughput_points.json against the GPU kinds (gpus.json's when None); errors start
    "throughput_points.json: "."""
    known = load_gpus().kinds if kinds is None else kinds
    try:
        r = Reader(raw)
        listed = r.data.get("points")
        if not isinstance(listed, list) or not listed:
            raise SchemaError("expected a non-empty list of measured points", field="points")
        points = tuple(_point(Reader(p, f"points[{i}]"), known) for i, p in enumerate(listed))
        return ThroughputPoints(version=r.integer("version", minimum=1), points=points)
    except SchemaError as exc:
        raise SchemaError(f"{POINTS_FILE}: {exc}") from exc


def read_throughput_points_json() -> dict[str, Any]:
    """The packaged schemas/data/throughput_points.json as plain JSON."""
    return packaged_object(POINTS_FILE)


@cache
def load_throughput_points() -> ThroughputPoints:
    """The packaged points, read and validated once per process."""
    return parse_throughput_points(read_throughput_points_json())
