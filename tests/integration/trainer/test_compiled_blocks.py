"""torch.compile per block (trainer/speed.py, LANDFALL_COMPILE): on CPU with inductor (a C++ compiler is on the
test machines), a compiled run of gpt-tiny reaches the same loss as an eager run of the same data and seed.

Tolerance: the final losses agree to a relative 1e-4. Compiled kernels fuse and reorder floating-point sums, so the
runs are not bit-identical, but over a few fp32 steps they stay within rounding of each other; a wrong gradient,
a skipped step or a different data order moves the loss by far more (the first steps of gpt-tiny change it by
about 1e-2 each).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests import datagen
from tests.trainer_runner import run_trainer, trainer_args, trainer_env

LOSS_RTOL = 1e-4
"""The relative difference allowed between the compiled and the eager run's final loss."""


def _train(
    data: Path, model_dir: Path, compile_mode: str, strategy: str = "ddp", processes: int = 1, backend: str = "inductor"
) -> dict[str, Any]:
    env = trainer_env(
        AIP_MODEL_DIR=str(model_dir),
        LANDFALL_COMPILE=compile_mode,
        LANDFALL_COMPILE_BACKEND=backend,
        LANDFALL_NPROC_PER_NODE=str(processes),
    )
    args = trainer_args(
        str(data),
        task="causal-lm",
        model="gpt-tiny",
        epochs=1,
        batch_size=8,
        learning_rate=0.003,
        strategy=strategy,
        extra=("--max-steps=6", "--hparam", "val_fraction=0", "warmup_steps=1"),
    )
    run = run_trainer(args, env, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    metrics: dict[str, Any] = json.loads((model_dir / "metrics.json").read_text())
    return metrics


def _text(root: Path) -> Path:
    root.mkdir()
    for shard in range(2):
        (root / f"part-{shard}.txt").write_text(datagen.text_corpus(600, seed=shard))
    return root


def test_compiled_blocks_train_to_the_eager_loss(tmp_path: Path) -> None:
    data = _text(tmp_path / "text")
    eager = _train(data, tmp_path / "eager", "off")
    compiled = _train(data, tmp_path / "compiled", "on")
    assert eager["compile_seconds"] is None
    assert isinstance(compiled["compile_seconds"], float) and compiled["compile_seconds"] > 0
    # the step that compiled is left out of the training rate: with it, the mean would be at least its share
    assert compiled["step_seconds"] < compiled["compile_seconds"] / compiled["steps"]
    assert compiled["warnings"] == [], "compiling fell back to eager; the comparison would be eager with eager"
    eager_loss, compiled_loss = eager["final"]["loss"], compiled["final"]["loss"]
    assert eager["steps"] == compiled["steps"] == 6
    assert abs(compiled_loss - eager_loss) <= LOSS_RTOL * abs(eager_loss), (eager_loss, compiled_loss)
    warmup = compiled["warmup"]
    assert isinstance(warmup, dict) and warmup["steps"] == 3 and warmup["steady_steps"] == 3


@pytest.mark.slow
def test_compiled_blocks_inside_fsdp_train_to_the_eager_loss(tmp_path: Path) -> None:
    """Two processes, each block compiled and then sharded (fully_shard): FSDP's gathers stay outside the compiled
    forward. aot_eager traces and partitions the graphs without generating code, to keep two compilers off two cores;
    it computes the same kernels as eager, so the losses agree to the same tolerance."""
    data = _text(tmp_path / "text")
    eager = _train(data, tmp_path / "eager", "off", strategy="fsdp", processes=2)
    compiled = _train(data, tmp_path / "compiled", "on", strategy="fsdp", processes=2, backend="aot_eager")
    assert compiled["world_size"] == 2 and compiled["warnings"] == []
    assert isinstance(compiled["compile_seconds"], float) and compiled["compile_seconds"] > 0
    eager_loss, compiled_loss = eager["final"]["loss"], compiled["final"]["loss"]
    assert abs(compiled_loss - eager_loss) <= LOSS_RTOL * abs(eager_loss), (eager_loss, compiled_loss)
