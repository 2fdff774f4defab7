"""bench/trainer_gpu.py's parts that need no GPU: the warm-up and steady rows it prints from a run's metrics.json,
the GPU kind of a device name, and the measured points it writes (read back by the planner's own loader; never into
the shipped file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.trainer_gpu import SHIPPED_POINTS, gpu_kind, measured_point, phase_rows, planner_flops, write_points
from schemas.throughput_points import load_throughput_points, parse_throughput_points


def _metrics(**changes: Any) -> dict[str, Any]:
    metrics: dict[str, Any] = {
        "batch": {"global_batch_size": 16},
        "steps": 13,
        "step_seconds": 0.5,
        "final": {"loss": 3.2},
        "peak_memory_bytes": 3 * 2**30,
        "compile_seconds": 41.0,
        "warmup": {"steps": 3, "seconds": 45.0, "steady_steps": 10, "steady_seconds": 2.0},
    }
    metrics.update(changes)
    return metrics


def test_the_warm_up_and_the_steady_state_are_rows_of_their_own() -> None:
    warm, steady = phase_rows(_metrics(), 1e9, 1024, 2, datasheet_peak=100e9, measured_peak=50e9)
    assert (warm["phase"], warm["steps"], steady["phase"], steady["steps"]) == ("warm-up", 3, "steady", 10)
    assert steady["samples_per_second"] == pytest.approx(160 / 2.0)
    assert steady["tokens_per_second"] == pytest.approx(80 * 1024)
    assert steady["mfu_datasheet"] == pytest.approx(80 * 1e9 / (100e9 * 2))
    assert steady["mfu_measured"] == pytest.approx(2 * steady["mfu_datasheet"])
    assert warm["samples_per_second"] == pytest.approx(48 / 45.0)
    assert (steady["compile_seconds"], steady["peak_memory_bytes"]) == (41.0, 3 * 2**30)


def test_a_run_without_steady_steps_is_one_row_and_a_cpu_has_no_datasheet_mfu() -> None:
    (row,) = phase_rows(_metrics(warmup=None, steps=2), 1e9, 64, 1, datasheet_peak=None, measured_peak=1e9)
    assert row["phase"] == "whole run" and row["mfu_datasheet"] is None
    assert row["samples_per_second"] == pytest.approx(32 / 1.0)


def test_device_names_map_to_gpu_kinds() -> None:
    assert gpu_kind("NVIDIA H200") == "NVIDIA_H200_141GB"
    assert gpu_kind("NVIDIA H100 80GB HBM3") == "NVIDIA_H100_80GB"
    assert gpu_kind("Some Accelerator 9000") is None


def test_points_are_written_in_the_shipped_format_and_never_over_the_shipped_file(tmp_path: Path) -> None:
    flops, seq_len = planner_flops("gpt-124m")
    assert seq_len == 1024
    assert flops == next(p.flops_per_sample for p in load_throughput_points().points if p.model == "gpt-124m")
    steady = phase_rows(_metrics(), flops, seq_len, 1, 989e12, 700e12)[-1]
    point = measured_point("NVIDIA_H100_80GB", 1, "gpt-124m", flops, 16, "bf16", "fsdp", steady, "bench run")
    out = tmp_path / "points.json"
    write_points(out, [point])
    (parsed,) = parse_throughput_points(json.loads(out.read_text())).points
    assert (parsed.micro_batch, parsed.strategy, parsed.samples_per_second) == (16, "fsdp", 80.0)
    before = SHIPPED_POINTS.read_bytes()
    with pytest.raises(SystemExit, match="shipped"):
        write_points(SHIPPED_POINTS, [point])
    assert SHIPPED_POINTS.read_bytes() == before
