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

from tests import datagen
from tests.trainer_runner import run_trainer, trainer_args, trainer_env

LOSS_RTOL = 1e-4
"""The relative difference allowed between the compiled and the eager run's final loss."""


def _train(data: Path, model_dir: Path, compile_mode: str) -> dict[str, Any]:
    env = trainer_env(AIP_MODEL_DIR=str(model_dir), LANDFALL_COMPILE=compile_mode, LANDFALL_NPROC_PER_NODE="1")
    args = trainer_args(
        str(data),
        task="causal-lm",
        model="gpt-tiny",
        epochs=1,
        batch_size=8,
        learning_rate=0.003,
        extra=("--max-steps=6", "--hparam", "val_fraction=0", "warmup_steps=1"),
    )
    run = run_trainer(args, env, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    metrics: dict[str, Any] = json.loads((model_dir / "metrics.json").read_text())
    return metrics


def test_compiled_blocks_train_to_the_eager_loss(tmp_path: Path) -> None:
    data = tmp_path / "text"
    data.mkdir()
    for shard in range(2):
        (data / f"part-{shard}.txt").write_text(datagen.text_corpus(600, seed=shard))
    eager = _train(data, tmp_path / "eager", "off")
    compiled = _train(data, tmp_path / "compiled", "on")
    assert eager["compile_seconds"] is None
    assert isinstance(compiled["compile_seconds"], float) and compiled["compile_seconds"] > 0
    assert compiled["warnings"] == [], "compiling fell back to eager; the comparison would be eager with eager"
    eager_loss, compiled_loss = eager["final"]["loss"], compiled["final"]["loss"]
    assert eager["steps"] == compiled["steps"] == 6
    assert abs(compiled_loss - eager_loss) <= LOSS_RTOL * abs(eager_loss), (eager_loss, compiled_loss)
    warmup = compiled["warmup"]
    assert isinstance(warmup, dict) and warmup["steps"] == 3 and warmup["steady_steps"] == 3
