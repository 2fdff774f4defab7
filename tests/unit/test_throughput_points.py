"""The measured throughput points (schemas/data/throughput_points.json): every GPU figure the docs report is there,
with the planner's FLOPs, and a malformed point is refused naming the point, the field and what was expected."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from functions.planning import PlanInput
from functions.planning.catalog import load_catalog
from functions.planning.workload import build_workload
from schemas.errors import SchemaError
from schemas.throughput_points import load_throughput_points, parse_throughput_points, read_throughput_points_json

# (GPU kind, model, micro-batch, strategy) -> samples/s, as docs/measurements/trainer.md ("Trainer (GPU)") prints them.
DOCUMENTED = {
    ("NVIDIA_H100_80GB", "gpt-124m", 8, "ddp"): 94.86,
    ("NVIDIA_H100_80GB", "gpt-124m", 8, "fsdp"): 123.89,
    ("NVIDIA_H100_80GB", "gpt-124m", 16, "ddp"): 152.77,
    ("NVIDIA_H100_80GB", "gpt-350m", 8, "ddp"): 74.85,
    ("NVIDIA_H100_80GB", "gpt-350m", 8, "fsdp"): 75.27,
    ("NVIDIA_H200_141GB", "gpt-124m", 8, "ddp"): 101.77,
    ("NVIDIA_H200_141GB", "gpt-124m", 8, "fsdp"): 143.90,
    ("NVIDIA_H200_141GB", "gpt-124m", 32, "ddp"): 194.30,
    ("NVIDIA_H200_141GB", "gpt-124m", 32, "fsdp"): 192.70,
    ("NVIDIA_H200_141GB", "gpt-350m", 8, "ddp"): 82.09,
    ("NVIDIA_H200_141GB", "gpt-350m", 8, "fsdp"): 81.77,
    ("NVIDIA_H200_141GB", "gpt-350m", 16, "ddp"): 97.92,
    ("NVIDIA_H200_141GB", "gpt-350m", 16, "fsdp"): 98.44,
}


def test_every_documented_gpu_figure_is_a_point_with_its_source() -> None:
    points = load_throughput_points().points
    got = {(p.accelerator_type, p.model, p.micro_batch, p.strategy): p.samples_per_second for p in points}
    assert got == DOCUMENTED
    for point in points:
        assert point.source.startswith('docs/measurements/trainer.md, "Trainer (GPU)"')
        assert (point.gpus, point.processes, point.precision) == (1, 1, "bf16")


def test_each_point_s_flops_are_the_planner_s() -> None:
    """The file states the FLOPs the planner counts for the preset: a change to the workload model shows here."""
    a = load_catalog().assumptions
    for point in load_throughput_points().points:
        work = build_workload(PlanInput(task="causal-lm", preset=point.model, dataset_bytes=10**9), a)
        assert point.flops_per_sample == work.flops_per_sample, point.model


def _first(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    raw = copy.deepcopy(read_throughput_points_json())
    change(raw["points"][0])
    return raw


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            _first(lambda p: p.update(accelerator_type="NVIDIA_K80")),
            "points[0].accelerator_type: 'NVIDIA_K80' is not a GPU kind of gpus.json; expected one of NVIDIA_TESLA_T4",
        ),
        (_first(lambda p: p.update(samples_per_second=0)), "points[0].samples_per_second: expected a positive number"),
        (_first(lambda p: p.update(micro_batch=0)), "points[0].micro_batch: must be >= 1, got 0"),
        (_first(lambda p: p.update(precision="int8")), "points[0].precision: 'int8' is not one of"),
        (_first(lambda p: p.update(processes=2)), "points[0].processes: expected at most one process per GPU"),
        (_first(lambda p: p.update(reported_mfu=6.1)), "points[0].reported_mfu: expected a fraction in (0, 1]"),
        (_first(lambda p: p.update(source=" ")), "points[0]: expected the page and section the figures come from"),
        (_first(lambda p: p.pop("flops_per_sample")), "points[0].flops_per_sample: is required but missing"),
        (_first(lambda p: p.update(samples_per_sec=1.0)), "points[0].samples_per_sec: is not a field"),
        ({"version": 1, "points": []}, "points: expected a non-empty list of measured points"),
    ],
)
def test_a_malformed_point_is_refused_naming_the_file_point_and_field(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(SchemaError) as caught:
        parse_throughput_points(raw)
    assert str(caught.value).startswith("throughput_points.json: ")
    assert message in str(caught.value)


def test_a_point_on_a_kind_without_that_math_is_refused() -> None:
    raw = _first(lambda p: p.update(accelerator_type="NVIDIA_TESLA_T4"))
    with pytest.raises(SchemaError, match=r"points\[0\]\.precision: T4 has no bf16 math"):
        parse_throughput_points(raw)
