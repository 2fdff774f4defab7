"""Failures the trainer must report as such, in one process: out-of-memory, GCS FUSE paths that are not mounted.
Bad data, bad flags and failed ranks through `python -m trainer.task` are in tests/integration/trainer/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests import datagen
from tests.trainer_runner import trainer_args
from trainer import storage


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
