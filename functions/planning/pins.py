"""Pinned shapes: what a request may pin (constraints.machine_type, accelerator_count, replica_count), checked against
the catalog before anything is planned.

A pin that names no shape the catalog holds (an unknown machine type, a GPU count the machine does not take, more
machines than Landfall plans for) is bad input: each problem names the field, the value and the valid values, and
the dispatcher turns them into a REJECTED run without planning or submitting anything. A pin that exists but cannot
run the request (too little memory, over quota, past the deadline) is planned and rejected with the reason instead.
"""

from __future__ import annotations

import difflib

from functions.planning.catalog import Catalog
from functions.planning.inputs import PlanInput
from functions.planning.layouts import unsupported_text
from functions.planning.space import NO_PIN, PIPELINE_DEGREES, TENSOR_DEGREES, ShapePin
from functions.planning.workload import Workload


def pin_of(inp: PlanInput) -> ShapePin:
    pin = ShapePin(inp.machine_type, inp.accelerator_count, inp.replica_count)
    return pin if pin.active else NO_PIN


def _listed(values: list[str], limit: int = 12) -> str:
    shown = ", ".join(values[:limit])
    return shown + (f" and {len(values) - limit} more (`landfall catalog` lists them)" if len(values) > limit else "")


def pin_problems(inp: PlanInput, catalog: Catalog) -> list[str]:
    """Every reason the pinned shape is not one Vertex and the catalog offer, naming the valid values (empty: fine)."""
    pin = pin_of(inp)
    if not pin.active:
        return []
    problems: list[str] = []
    machine_types = list(dict.fromkeys(shape.machine_type for shape in catalog.shapes))
    shapes = catalog.shapes
    if pin.machine_type:
        shapes = tuple(shape for shape in catalog.shapes if shape.machine_type == pin.machine_type)
        if not shapes:
            family = pin.machine_type.rsplit("-", 1)[0]
            same_family = [m for m in machine_types if m.startswith(pin.machine_type) or m.rsplit("-", 1)[0] == family]
            near = difflib.get_close_matches(pin.machine_type, machine_types, n=3)
            hint = f"did you mean {' or '.join(near)}? " if near else ""
            valid = same_family or machine_types
            problems.append(
                f"constraints.machine_type: {pin.machine_type!r} is not a machine type Landfall plans "
                f"for; {hint}valid: {_listed(valid)}"
            )
            return problems
    if pin.accelerator_count:
        counts = sorted({shape.accelerator_count for shape in shapes if shape.accelerator_type})
        if pin.accelerator_count not in counts:
            if pin.machine_type and not counts:
                problems.append(
                    f"constraints.accelerator_count: {pin.machine_type} is a CPU-only machine type and "
                    f"takes no GPUs, not {pin.accelerator_count}; valid: 0"
                )
            elif pin.machine_type:
                kinds = sorted({shape.accelerator_type for shape in shapes if shape.accelerator_type})
                problems.append(
                    f"constraints.accelerator_count: {pin.machine_type} takes "
                    f"{' or '.join(map(str, counts))} x {'/'.join(kinds)}, not {pin.accelerator_count}; "
                    f"valid: {', '.join(map(str, counts))} (or 0 to let the planner choose)"
                )
            else:
                problems.append(
                    f"constraints.accelerator_count: no machine type takes {pin.accelerator_count} GPUs; "
                    f"valid: {', '.join(map(str, counts))} (or 0 to let the planner choose)"
                )
            return problems
        shapes = tuple(shape for shape in shapes if shape.accelerator_count == pin.accelerator_count)
    if pin.replica_count:
        most = max(catalog.assumptions.scale_out_nodes)
        gpu_shapes = [shape for shape in shapes if not shape.is_cpu_only]
        if not gpu_shapes and pin.replica_count > 1:
            problems.append(
                f"constraints.replica_count: {pin.machine_type or 'a CPU-only machine'} trains on one "
                f"machine (one process, no GPUs to spread over), not {pin.replica_count}; valid: 1 (or 0 "
                "to let the planner choose)"
            )
        elif pin.replica_count > most:
            problems.append(
                f"constraints.replica_count: {pin.replica_count} machines is more than Landfall plans "
                f"for; valid: 1 to {most} (or 0 to let the planner choose)"
            )
    return problems


def layout_pin_problems(inp: PlanInput, work: Workload) -> list[str]:
    """Why the layout the request pins (constraints.tensor_parallel, pipeline_parallel) is not one the planner weighs
    or the workload runs, naming the field and the valid values (empty: fine or free)."""
    problems = []
    for name, pinned, degrees in (
        ("tensor_parallel", inp.tensor_parallel, TENSOR_DEGREES),
        ("pipeline_parallel", inp.pipeline_parallel, PIPELINE_DEGREES),
    ):
        if pinned and pinned not in degrees:
            problems.append(
                f"constraints.{name}: {pinned} is not a degree Landfall plans; valid: "
                f"{', '.join(map(str, degrees))} (or 0 for the planner's choice)"
            )
    tensor, pipeline = inp.tensor_parallel or 1, inp.pipeline_parallel or 1
    if not problems and tensor * pipeline > 1:
        why = unsupported_text(work, tensor, pipeline)
        if why:
            field = "tensor_parallel" if tensor > 1 else "pipeline_parallel"
            problems.append(f"constraints.{field}: {why}; pin 1 (or 0) instead")
    return problems
