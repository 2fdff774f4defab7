"""Planned against measured throughput: the planner pinned to each measured GPU configuration.

    .venv/bin/python bench/estimates.py [--json]

For every point of schemas/data/throughput_points.json, plans the point's model at its micro-batch per GPU, pinned
to a machine of its GPU kind (the catalog's shape with the point's GPU count, else the smallest with more: the
catalog sells the H200 only eight to a machine), with a global batch of micro-batch x the machine's GPUs, and
prints the planned samples per second per GPU beside the measured one and their ratio. Target: every point within
25 %. Figures are printed, never asserted; it needs no GPU (it reads the points, it runs no trainer).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from functions.planning import PlanInput, plan_request
from functions.planning.catalog import Catalog, MachineShape, load_catalog
from schemas.model_presets import GptPreset, get_preset
from schemas.throughput_points import ThroughputPoint, load_throughput_points

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
TOLERANCE = 0.25
"""Planned within this fraction of measured (either way)."""


@dataclass(frozen=True)
class Estimate:
    """One point planned."""

    gpu: str
    model: str
    micro_batch: int
    strategy: str
    measured_per_gpu: float
    planned_per_gpu: float
    """0 where the planner made no plan (`note` says why)."""
    planned_micro_batch: int
    machine: str
    mfu: float
    """The MFU the planner assumed for the plan."""
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.planned_per_gpu / self.measured_per_gpu

    @property
    def within(self) -> bool:
        return self.planned_micro_batch == self.micro_batch and abs(self.ratio - 1) <= TOLERANCE


def pinned_shape(catalog: Catalog, point: ThroughputPoint) -> MachineShape:
    """The point's GPU kind on a machine with its GPU count, else the smallest shape with more."""
    shapes = [s for s in catalog.shapes if s.accelerator_type == point.accelerator_type and s.accelerator_count]
    if not shapes:
        raise ValueError(f"no machine shape of the catalog carries {point.accelerator_type}")
    fitting = [s for s in shapes if s.accelerator_count >= point.gpus] or shapes
    return min(fitting, key=lambda s: (s.accelerator_count != point.gpus, s.accelerator_count))


def request_for(point: ThroughputPoint, shape: MachineShape) -> PlanInput:
    """The point's model at its micro-batch on every GPU of one `shape` machine."""
    task = "causal-lm" if isinstance(get_preset(point.model), GptPreset) else "tabular-classification"
    return PlanInput(
        task=task,
        preset=point.model,
        dataset_bytes=10**9,
        batch_size=point.micro_batch * shape.accelerator_count,
        precision="fp32" if point.precision == "fp32" else "auto",
        machine_type=shape.machine_type,
        accelerator_count=shape.accelerator_count,
        replica_count=1,
        flex_start="allowed",
    )


def estimate(point: ThroughputPoint, catalog: Catalog) -> Estimate:
    shape = pinned_shape(catalog, point)
    outcome = plan_request(request_for(point, shape), now=NOW)
    plan = outcome.plan
    row = Estimate(
        gpu=catalog.gpus[point.accelerator_type].display,
        model=point.model,
        micro_batch=point.micro_batch,
        strategy=point.strategy,
        measured_per_gpu=point.samples_per_second / point.gpus,
        planned_per_gpu=0.0,
        planned_micro_batch=0,
        machine=shape.machine_type,
        mfu=0.0,
        note=outcome.rejection or "no plan",
    )
    if plan is None:
        return row
    gpus = plan.accelerator_count * plan.replica_count
    work = outcome.evaluation.workload.flops_per_sample * plan.micro_batch_size
    return replace(
        row,
        planned_per_gpu=plan.global_batch_size / plan.estimated_step_time_seconds / gpus,
        planned_micro_batch=plan.micro_batch_size,
        machine=f"{plan.machine_type} ({gpus} GPU{'s' if gpus > 1 else ''}, {plan.strategy})",
        mfu=catalog.throughput.mfu(point.accelerator_type, work),
        note="",
    )


def estimates() -> list[Estimate]:
    catalog = load_catalog()
    return [estimate(point, catalog) for point in load_throughput_points().points]


def table(rows: list[Estimate]) -> str:
    head = f"{'GPU':<10} {'model':<9} {'micro':>5} {'run':<5} {'measured/s':>10} {'planned/s':>9} {'ratio':>6}"
    lines = [head + f" {'MFU':>6}  planned on", "-" * (len(head) + 40)]
    for r in rows:
        flag = "" if r.within else "  <- outside 25 %"
        planned = f"{r.planned_per_gpu:9.1f}" if r.planned_per_gpu else f"{'-':>9}"
        ratio = f"{r.ratio:6.2f}" if r.planned_per_gpu else f"{'-':>6}"
        lines.append(
            f"{r.gpu:<10} {r.model:<9} {r.micro_batch:>5} {r.strategy:<5} {r.measured_per_gpu:10.1f} {planned} "
            f"{ratio} {r.mfu:6.1%}  {r.machine}{flag}{'; ' + r.note if r.note else ''}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object per point instead of the table")
    args = parser.parse_args()
    rows = estimates()
    if args.json:
        for r in rows:
            print(json.dumps({**asdict(r), "ratio": round(r.ratio, 4), "within": r.within}))
        return 0
    print("planned against measured samples/s per GPU (schemas/data/throughput_points.json; the planner pinned)")
    print(table(rows))
    inside = sum(r.within for r in rows)
    ratios = [r.ratio for r in rows if r.planned_per_gpu]
    spread = f"ratios {min(ratios):.2f} to {max(ratios):.2f}" if ratios else "no plan"
    verdict = "met" if inside == len(rows) else "NOT met"
    print(f"target every point within {TOLERANCE:.0%}: {verdict} ({inside} of {len(rows)}; {spread})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
