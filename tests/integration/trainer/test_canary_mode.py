"""The built-in trainer's canary mode (docs/canary.md, trainer/canary.py), as `python -m trainer.launcher` runs it on a
CPU with two processes: a few steps, one all-reduce over both, a checkpoint written and read back, and canary.json
(schemas/canary.py) in AIP_MODEL_DIR instead of a model."""

from __future__ import annotations

from pathlib import Path

from schemas.canary import parse_canary_report
from tests import datagen
from tests.trainer_runner import run_trainer, trainer_args, trainer_env


def test_canary_mode_measures_a_few_steps_an_all_reduce_and_a_checkpoint(tmp_path: Path) -> None:
    data = datagen.write_csv_shards(tmp_path / "data", shards=2, rows_per_shard=400)
    env = trainer_env(
        AIP_MODEL_DIR=str(tmp_path / "model"),
        AIP_CHECKPOINT_DIR=str(tmp_path / "checkpoints"),
        LANDFALL_NPROC_PER_NODE="2",
        LANDFALL_CANARY="1",
        LANDFALL_CANARY_STEPS="3",
        LANDFALL_CANARY_BUCKET_BYTES=str(1 << 20),
    )
    run = run_trainer(trainer_args(str(data), epochs=5, batch_size=16), env, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    figures = parse_canary_report((tmp_path / "model" / "canary.json").read_text())
    assert figures.steps == 3, "it stopped at the canary's step limit, not the run's 5 epochs"
    assert figures.step_seconds is not None and figures.step_seconds > 0
    assert figures.memory_kind == "cpu-rss" and (figures.peak_memory_bytes or 0) > 10 * 2**20
    assert (figures.processes, figures.allreduce_bytes) == (2, 1 << 20)
    assert figures.allreduce_seconds is not None and (figures.allreduce_gbps or 0) > 0
    assert figures.checkpoint_ok is True and (figures.checkpoint_bytes or 0) > 0 and figures.failed == ""
    assert not (tmp_path / "model" / "model.pt").exists(), "a canary writes no model"
    assert run.messages("canary finished")


def test_a_malformed_canary_setting_fails_as_bad_config(tmp_path: Path) -> None:
    data = datagen.write_csv_shards(tmp_path / "data", shards=1, rows_per_shard=100)
    env = trainer_env(AIP_MODEL_DIR=str(tmp_path / "model"), LANDFALL_CANARY="1", LANDFALL_CANARY_STEPS="few")
    run = run_trainer(trainer_args(str(data), epochs=1), env)
    assert run.returncode == 2, run.stdout[-3000:] + run.stderr[-3000:]
    assert "LANDFALL_CANARY_STEPS" in (tmp_path / "model" / "failure.json").read_text()
