"""Failures the trainer must report as such, through `python -m trainer.task` processes: bad data and bad flags,
failed ranks. Out-of-memory and GCS FUSE paths, in one process, are in tests/unit/trainer/test_failures.py."""

from __future__ import annotations

from pathlib import Path

from tests import datagen
from tests.trainer_runner import run_trainer, trainer_args, trainer_env


def test_bad_data_fails_fast_with_file_and_line_and_exit_code_3(tmp_path: Path) -> None:
    data = datagen.write_csv_shards(tmp_path / "data", shards=2, rows_per_shard=50)
    (data / "part-001.csv").write_text("a,b,c,label\n1,2,3,0\n4,5,6\n")
    run = run_trainer(trainer_args(str(data)), trainer_env(AIP_MODEL_DIR=str(tmp_path / "model")))
    assert run.returncode == 3
    error = run.trainer_error()
    assert error["severity"] == "ERROR" and error["error"] == "DataError"
    assert f"{data / 'part-001.csv'} line 3" in error["message"] and "ragged" in error["message"]
    assert [p.name for p in (tmp_path / "model").iterdir()] == ["failure.json"]  # no model, only the reason


def test_missing_model_dir_and_wrong_preset_family_are_config_errors(tmp_path: Path) -> None:
    data = datagen.write_csv_shards(tmp_path / "data", shards=1, rows_per_shard=50)
    run = run_trainer(trainer_args(str(data)), trainer_env())
    assert run.returncode == 2 and "AIP_MODEL_DIR is not set" in run.trainer_error()["message"]
    run = run_trainer(trainer_args(str(data), model="gpt-tiny"), trainer_env(AIP_MODEL_DIR=str(tmp_path / "m")))
    assert run.returncode == 2 and "needs an mlp-* one" in run.trainer_error()["message"]


def test_one_failing_process_fails_the_node(tmp_path: Path) -> None:
    """With 2 processes per node, a data error on one rank must end the replica non-zero, not hang it."""
    data = datagen.write_csv_shards(tmp_path / "data", shards=2, rows_per_shard=50)
    (data / "part-001.csv").write_bytes(b"a,b,c,label\n1,2,3,0\n\xff,2,3,1\n")
    env = trainer_env(AIP_MODEL_DIR=str(tmp_path / "model"), LANDFALL_NPROC_PER_NODE="2")
    run = run_trainer(trainer_args(str(data)), env, timeout=90)
    assert run.returncode == 3
    assert any(r.get("error") == "DataError" and "line 3" in r["message"] for r in run.records())
