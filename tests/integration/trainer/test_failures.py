"""Failures the trainer must report as such: bad data and bad flags through the CLI, out-of-memory, failed ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests import datagen
from tests.trainer_runner import run_trainer, trainer_args, trainer_env
from trainer import storage


def test_bad_data_fails_fast_with_file_and_line_and_exit_code_3(tmp_path: Path) -> None:
    data = datagen.write_csv_shards(tmp_path / "data", shards=2, rows_per_shard=50)
    (data / "part-001.csv").write_text("a,b,c,label\n1,2,3,0\n4,5,6\n")
    run = run_trainer(trainer_args(str(data)), trainer_env(AIP_MODEL_DIR=str(tmp_path / "model")))
    assert run.returncode == 3
    error = run.records()[-1]
    assert error["severity"] == "ERROR" and error["error"] == "DataError"
    assert f"{data / 'part-001.csv'} line 3" in error["message"] and "ragged" in error["message"]
    assert not (tmp_path / "model").exists()


def test_missing_model_dir_and_wrong_preset_family_are_config_errors(tmp_path: Path) -> None:
    data = datagen.write_csv_shards(tmp_path / "data", shards=1, rows_per_shard=50)
    run = run_trainer(trainer_args(str(data)), trainer_env())
    assert run.returncode == 2 and "AIP_MODEL_DIR is not set" in run.records()[-1]["message"]
    run = run_trainer(trainer_args(str(data), model="gpt-tiny"), trainer_env(AIP_MODEL_DIR=str(tmp_path / "m")))
    assert run.returncode == 2 and "needs an mlp-* one" in run.records()[-1]["message"]


def test_one_failing_process_fails_the_node(tmp_path: Path) -> None:
    """With 2 processes per node, a data error on one rank must end the replica non-zero, not hang it."""
    data = datagen.write_csv_shards(tmp_path / "data", shards=2, rows_per_shard=50)
    (data / "part-001.csv").write_bytes(b"a,b,c,label\n1,2,3,0\n\xff,2,3,1\n")
    env = trainer_env(AIP_MODEL_DIR=str(tmp_path / "model"), LANDFALL_NPROC_PER_NODE="2")
    run = run_trainer(trainer_args(str(data)), env, timeout=90)
    assert run.returncode == 3
    assert any(r.get("error") == "DataError" and "line 3" in r["message"] for r in run.records())


def test_out_of_memory_is_reported_as_such(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """A CUDA OOM inside a step becomes exit code 4 and a message naming the knobs to turn."""
    from trainer import loop, task

    def exhausted(*_args, **_kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(loop, "train_step", exhausted)
    data = datagen.write_csv_shards(tmp_path / "data", shards=1, rows_per_shard=100)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LANDFALL_NPROC_PER_NODE", "AIP_CHECKPOINT_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AIP_MODEL_DIR", str(tmp_path / "model"))
    assert task.main(trainer_args(str(data))) == 4
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["error"] == "OutOfMemory" and "out of memory on cpu at step 0" in last["message"]
    assert "--batch-size" in last["message"] and "--strategy=fsdp" in last["message"]


def test_gcs_fuse_paths_fall_back_to_the_bucket_when_not_mounted() -> None:
    assert storage.resolve("/gcs/bucket/data/x.csv") == "gs://bucket/data/x.csv"
    assert storage.split_gcs("/gcs/bucket/data/x.csv") == ("bucket", "data/x.csv")
    assert storage.resolve("/tmp/x.csv") == "/tmp/x.csv"
    assert storage.join("gs://b/run/", "/model/", "metrics.json") == "gs://b/run/model/metrics.json"
