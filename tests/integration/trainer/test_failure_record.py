"""`python -m trainer.task` processes that fail leave their reason in AIP_MODEL_DIR/failure.json (the record the
completion listener puts on the run), also when one of several processes on a node is the one that failed."""

from __future__ import annotations

import uuid
from pathlib import Path

from schemas.trainer_failure import FAILURE_FILE, parse_trainer_failure
from tests import datagen
from tests.conftest import Emulator
from tests.trainer_runner import run_trainer, trainer_args, trainer_env


def test_bad_data_leaves_a_data_error_record_with_the_trainers_message(tmp_path: Path) -> None:
    data = datagen.write_csv_shards(tmp_path / "data", shards=2, rows_per_shard=50)
    (data / "part-001.csv").write_text("a,b,c,label\n1,2,3,0\n4,5,6\n")
    run = run_trainer(trainer_args(str(data)), trainer_env(AIP_MODEL_DIR=str(tmp_path / "model")))
    assert run.returncode == 3
    record = parse_trainer_failure((tmp_path / "model" / FAILURE_FILE).read_text())
    assert (record.kind, record.exit_code) == ("DataError", 3)
    assert record.message == run.trainer_error()["message"] and f"{data / 'part-001.csv'} line 3" in record.message


def test_with_two_processes_the_failing_ranks_reason_is_recorded(tmp_path: Path) -> None:
    data = datagen.write_csv_shards(tmp_path / "data", shards=2, rows_per_shard=50)
    (data / "part-001.csv").write_bytes(b"a,b,c,label\n1,2,3,0\n\xff,2,3,1\n")
    env = trainer_env(AIP_MODEL_DIR=str(tmp_path / "model"), LANDFALL_NPROC_PER_NODE="2")
    run = run_trainer(trainer_args(str(data)), env, timeout=90)
    assert run.returncode == 3
    record = parse_trainer_failure((tmp_path / "model" / FAILURE_FILE).read_text())
    assert record.kind == "DataError" and "line 3" in record.message and record.rank in (0, 1)


def test_a_record_is_created_only_where_none_is_on_cloud_storage(gcs_emulator: Emulator) -> None:
    from trainer import storage

    bucket = f"failures-{uuid.uuid4().hex[:8]}"
    storage.client().create_bucket(bucket)
    uri = f"gs://{bucket}/runs/r1/model/{FAILURE_FILE}"
    assert storage.create_bytes(uri, b'{"first": 1}') is True
    assert storage.create_bytes(uri, b'{"second": 2}') is False
    with storage.open_read(uri) as fh:
        assert fh.read() == b'{"first": 1}'
