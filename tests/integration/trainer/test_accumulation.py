"""Gradient accumulation trains what one big batch trains: on CPU with gloo, 2 processes x 2
accumulation micro-steps end with the same per-step loss and the same weights as one process taking the whole
global batch in one pass, under DDP and under FSDP (FULL_SHARD, with activation checkpointing on as well); and the
accumulating micro-steps reduce no gradients (as many reductions per step as without accumulation).

The reference and the distributed runs draw the same global batches; the worker (accumulation_worker.py) drives
the trainer's own train_step. SGD without clipping makes the weights a linear function of the gradient, so a wrong
loss scale or a missing reduction moves them by far more than the tolerance (the test checks that too).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer_runner import finish, start_processes

BATCH, ACCUMULATION, PROCESSES = 8, 2, 2
TOLERANCE = 2e-5
"""Absolute, on fp32 weights of order 0.02 to 1 and on losses near ln(256) = 5.5: float reordering (a sum over
processes instead of over one batch) stays below 1e-6; a lost factor of 2 would not."""


def launch(
    out: Path, strategy: str, processes: int, accumulation: int, checkpointing: bool = False
) -> list[subprocess.Popen]:
    argv = [
        sys.executable,
        "-m",
        "tests.integration.trainer.accumulation_worker",
        "--strategy",
        strategy,
        "--batch",
        str(BATCH),
        "--accumulation",
        str(accumulation),
        "--out",
        str(out),
    ]
    if checkpointing:
        argv.append("--activation-checkpointing")
    return start_processes(argv, processes)


def result(out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    return json.loads((out / "result.json").read_text()), torch.load(out / "weights.pt", weights_only=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The single-process reference and the two distributed runs, started together and awaited."""
    root = tmp_path_factory.mktemp("accumulation")
    outs = {"reference": root / "reference", "ddp": root / "ddp", "fsdp": root / "fsdp"}
    procs = {
        "reference": launch(outs["reference"], "ddp", 1, 1),
        "ddp": launch(outs["ddp"], "ddp", PROCESSES, ACCUMULATION),
        "fsdp": launch(outs["fsdp"], "fsdp", PROCESSES, ACCUMULATION, checkpointing=True),
    }
    for group in procs.values():
        finish(group)
    return outs


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert set(a) == set(b)
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_processes_times_accumulation_train_exactly_what_one_big_batch_trains(
    runs: dict[str, Path], strategy: str
) -> None:
    reference, reference_weights = result(runs["reference"])
    accumulated, weights = result(runs[strategy])
    assert reference["split"] == {
        "global_batch_size": BATCH,
        "processes": 1,
        "micro_batch_size": BATCH,
        "gradient_accumulation_steps": 1,
    }
    assert accumulated["split"] == {
        "global_batch_size": BATCH,
        "processes": PROCESSES,
        "micro_batch_size": 2,
        "gradient_accumulation_steps": ACCUMULATION,
    }
    # The same initial weights, then the same loss and metric sums at every step, and the same weights at the end.
    assert max_difference(weights["initial"], reference_weights["initial"]) == 0.0
    assert accumulated["losses"] == pytest.approx(reference["losses"], abs=TOLERANCE)
    for got, want in zip(accumulated["sums"], reference["sums"], strict=True):
        assert got[2] == want[2] == BATCH * 64  # every token of the global batch counted once
        assert got[0] == pytest.approx(want[0], rel=TOLERANCE)
        assert got[1] == want[1]  # correct predictions: an integer count
    assert max_difference(weights["final"], reference_weights["final"]) < TOLERANCE
    moved = max_difference(reference_weights["final"], reference_weights["initial"])
    assert moved > 1000 * TOLERANCE, "the weights must move far more than the tolerance for the match to mean much"
    # Accumulating micro-steps reduce nothing: as many gradient reductions per run as with one pass per step.
    assert accumulated["syncs"] == accumulated["syncs_one_pass"] > 0
