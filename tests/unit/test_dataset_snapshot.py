"""A dataset version is a snapshot. The request carries the objects ingest measured (names,
generations, sizes and their digest; schemas/data_objects.py), the job passes them to the trainer, the trainer reads
exactly those (or, with the digest alone, refuses a folder that changed), and the run record says what was read.
The same chain against fake-gcs-server, Firestore and Pub/Sub: tests/integration/test_dataset_snapshot.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from functions.dispatch.job_spec import trainer_args
from schemas.data_objects import (
    INLINE_LIST_BYTES,
    DataObject,
    data_read,
    decode_objects,
    encode_objects,
    entry_bytes,
    objects_digest,
)
from schemas.errors import SchemaError
from schemas.plan import parse_plan
from schemas.training_request import content_key, parse_training_request
from tests.fakes.world import World
from trainer import storage
from trainer.config import parse_args
from trainer.datasets.shards import dataset_files, detect_format
from trainer.errors import ConfigError, DataError

EXAMPLES = Path(__file__).resolve().parents[2] / "schemas" / "examples"
EXAMPLE = json.loads((EXAMPLES / "training_request.json").read_text())
PLAN = parse_plan(json.loads((EXAMPLES / "plan_cpu.json").read_text()))
OBJECTS = (DataObject("part-0.csv", "1001", 20), DataObject("sub/part-1.csv", "1002", 30))


def with_dataset(**fields: object) -> dict:
    return {**EXAMPLE, "dataset": {**EXAMPLE["dataset"], **fields}}


def test_the_digest_is_over_names_generations_and_sizes_in_name_order() -> None:
    digest = objects_digest(OBJECTS)
    assert digest == objects_digest(reversed(OBJECTS))
    assert digest != objects_digest((replace(OBJECTS[0], generation="1003"), OBJECTS[1]))
    assert digest != objects_digest((replace(OBJECTS[0], size=21), OBJECTS[1]))
    assert decode_objects(encode_objects(OBJECTS)) == OBJECTS
    assert len(encode_objects(OBJECTS)) == 2 + sum(entry_bytes(o) for o in OBJECTS) + len(OBJECTS) - 1


def test_the_request_carries_the_list_and_refuses_a_list_its_digest_does_not_name() -> None:
    listed = [{"name": o.name, "generation": o.generation, "size": o.size} for o in OBJECTS]
    request = parse_training_request(with_dataset(objects=listed, objects_digest=objects_digest(OBJECTS)))
    assert request.dataset.objects == OBJECTS
    assert parse_training_request(request.to_json()) == request
    with pytest.raises(SchemaError, match=r"dataset\.objects_digest: does not match dataset.objects"):
        parse_training_request(with_dataset(objects=listed, objects_digest="0" * 64))
    with pytest.raises(SchemaError, match=r"dataset\.objects_digest: is required with dataset.objects"):
        parse_training_request(with_dataset(objects=listed, objects_digest=""))
    with pytest.raises(SchemaError, match=r"dataset.objects\[0\]: '../x.csv' is not a name relative"):
        parse_training_request(with_dataset(objects=[{"name": "../x.csv", "size": 1}], objects_digest="0" * 64))
    with pytest.raises(SchemaError, match=r"dataset\.objects_digest: expected 64 lowercase hex"):
        parse_training_request(with_dataset(objects_digest="abc"))


def test_a_user_request_without_the_list_keeps_working_and_keeps_its_content_key() -> None:
    bare = {"dataset": {"uri": "gs://b/d/"}, "task": "tabular-classification", "model": {"preset": "mlp-small"}}
    request = parse_training_request(bare)
    assert (request.dataset.objects, request.dataset.objects_digest) == ((), "")
    # The key of a request published without one is the hash it always was (fields added later count only when set).
    assert request.idempotency_key == content_key(request) == "content:874702990ba7fb06b267caddfa7b7851"
    args = trainer_args(request, replace(PLAN, global_batch_size=request.hyperparameters.batch_size))
    assert not [a for a in args if a.startswith(("--data-objects", "--data-digest"))]
    config = parse_args(args)
    assert (config.data_objects, config.data_digest) == ((), "")


def test_the_job_passes_the_snapshot_and_the_trainer_parses_it() -> None:
    listed = [{"name": o.name, "generation": o.generation, "size": o.size} for o in OBJECTS]
    request = parse_training_request(with_dataset(objects=listed, objects_digest=objects_digest(OBJECTS)))
    args = trainer_args(request, replace(PLAN, global_batch_size=request.hyperparameters.batch_size))
    assert f"--data-digest={objects_digest(OBJECTS)}" in args
    assert f"--data-objects={encode_objects(OBJECTS)}" in args
    config = parse_args(args)
    assert (config.data_objects, config.data_digest) == (OBJECTS, objects_digest(OBJECTS))
    wrong = [a if not a.startswith("--data-digest=") else "--data-digest=" + "1" * 64 for a in args]
    with pytest.raises(ConfigError, match="--data-objects does not have --data-digest"):
        parse_args(wrong)
    with pytest.raises(ConfigError, match="--data-objects: is not JSON"):
        parse_args([*args, "--data-objects=[oops"])


def test_the_trainer_reads_exactly_the_listed_objects_at_their_generations() -> None:
    files = dataset_files("gs://b/d/", OBJECTS, objects_digest(OBJECTS))
    assert files.files == ["gs://b/d/part-0.csv#1001", "gs://b/d/sub/part-1.csv#1002"]
    assert [storage.split_version(f) for f in files.files] == [
        ("gs://b/d/part-0.csv", "1001"),
        ("gs://b/d/sub/part-1.csv", "1002"),
    ]
    assert detect_format(files.files[0], "auto") == "csv"
    assert (files.read.source, files.read.object_count, files.read.total_bytes) == ("request", 2, 50)
    assert files.read.objects == OBJECTS
    assert storage.split_version("gs://b/d/x#notes") == ("gs://b/d/x#notes", "")
    assert storage.split_version("/tmp/x#12") == ("/tmp/x#12", "")


def test_a_local_folder_is_read_as_listed_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "part-0.csv").write_text("a,label\n1,0\n")
    (tmp_path / "_SUCCESS").write_text("")
    files = dataset_files(str(tmp_path))
    assert files.files == [str(tmp_path / "part-0.csv")]
    assert files.read.source == "listing"
    assert files.read.objects == (DataObject("part-0.csv", "", 12),)
    with pytest.raises(DataError, match="the folder changed since its dataset version was cut"):
        dataset_files(str(tmp_path), (), "0" * 64)
    assert dataset_files(str(tmp_path), (), files.read.objects_digest).read.source == "digest"


def test_a_list_past_the_inline_limit_is_named_by_its_digest() -> None:
    many = tuple(DataObject(f"part-{i:06d}.csv", str(10**15 + i), 100) for i in range(2000))
    assert len(encode_objects(many)) > INLINE_LIST_BYTES
    read = data_read(many, "digest")
    assert (read.objects, read.object_count, read.total_bytes) == ((), 2000, 200_000)
    assert read.objects_digest == objects_digest(many)


def test_the_run_record_types_what_the_trainer_read() -> None:
    w = World()
    assert w.deliver() == "submitted"
    (name,) = w.vertex.jobs
    artifacts = w.run().artifacts
    assert artifacts is not None
    read = data_read(OBJECTS, "request")
    w.objects[f"{artifacts.model_dir}metrics.json"] = json.dumps({"final": {"loss": 0.1}, "data": read.to_dict()})
    w.vertex.set_state(name, "JOB_STATE_SUCCEEDED")
    assert w.job_event(name.rsplit("/", 1)[-1]) == "recorded:SUCCEEDED"
    run = w.run()
    assert run.data_read == read
    assert run.metrics == {"final": {"loss": 0.1}}  # the list is kept once, typed
    assert w.doc()["data_read"]["objects"][0] == {"name": "part-0.csv", "generation": "1001", "size": 20}
