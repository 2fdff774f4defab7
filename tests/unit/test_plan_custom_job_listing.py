"""`landfall plan --custom-job` for a team's code writes the dataset listing the job's LANDFALL_DATA_FILES names,
through the dispatcher's own check, so the printed job runs as printed; a dataset the dispatcher would refuse, or a
listing that cannot be written, prints no job and says why."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from google.api_core.exceptions import Forbidden

from functions.gcp.gcs_objects import ObjectInfo
from schemas.training_request import parse_training_request
from tests.fakes.ingest import FakeObjects
from tests.unit.custom_job_golden import PROJECT, export, request_path

ARTIFACTS = [f"{PROJECT}-landfall-artifacts-us-central1", f"{PROJECT}-landfall-artifacts-europe-west4"]
OWN = ("own_script_two_nodes", "own_package", "own_image")


class Buckets(FakeObjects):
    """FakeObjects that keeps each write's bytes by bucket."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes_written: dict[tuple[str, str], bytes] = {}

    def write(self, bucket: str, name: str, data: bytes, content_type: str) -> None:
        self.bytes_written[(bucket, name)] = data
        super().write(bucket, name, data, content_type)


class Refusing(FakeObjects):
    """Storage that lists the dataset but refuses every write, as a bucket this machine may not write to does."""

    def write(self, bucket: str, name: str, data: bytes, content_type: str) -> None:
        raise Forbidden(f"POST /upload/storage/v1/b/{bucket}/o: the caller has no storage.objects.create")


class Untouchable(FakeObjects):
    def list(self, bucket: str, prefix: str) -> Iterator[ObjectInfo]:
        raise AssertionError("the built-in trainer's export must not list the dataset")

    def write(self, bucket: str, name: str, data: bytes, content_type: str) -> None:
        raise AssertionError("the built-in trainer's export must not write")


def env_of(body: dict[str, object]) -> dict[str, str]:
    pool = body["jobSpec"]["workerPoolSpecs"][0]  # type: ignore[index]
    return {e["name"]: e["value"] for e in pool["containerSpec"]["env"]}


@pytest.mark.parametrize("case", OWN)
def test_the_export_writes_the_listing_its_job_names_in_every_artifacts_bucket(case: str) -> None:
    storage = Buckets()
    prefix = parse_training_request(request_path(case).read_text()).dataset.prefix
    first = storage.put(f"{prefix}part-0.txt", b"one\ntwo\n")
    second = storage.put(f"{prefix}sub/part-1.txt", b"three\n")
    storage.put(f"{prefix}_SUCCESS", b"")  # a control file: not data
    code, out, err = export(case, "json", storage)
    assert code == 0, err
    body = json.loads(out)
    run_folder = body["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"].removeprefix("gs://")
    bucket, folder = run_folder.split("/", 1)
    named = env_of(body)["LANDFALL_DATA_FILES"]
    assert named == f"/gcs/{bucket}/{folder}data-files.jsonl"
    assert sorted(b for b, _ in storage.bytes_written) == sorted(ARTIFACTS)  # the job's bucket among them
    assert bucket in ARTIFACTS
    for (_, name), data in storage.bytes_written.items():
        assert name == f"{folder}data-files.jsonl"
        rows = [json.loads(line) for line in data.decode().splitlines()]
        assert rows == [
            {"name": "part-0.txt", "generation": first.generation, "size": 8},
            {"name": "sub/part-1.txt", "generation": second.generation, "size": 6},
        ]
    assert "wrote the dataset listing" in err and f"gs://{bucket}/{folder}data-files.jsonl" in err


def test_an_empty_dataset_prints_no_job_and_the_dispatcher_s_reason() -> None:
    storage = Buckets()
    storage.put("datasets/web-small/_SUCCESS", b"")
    code, out, err = export("own_script_two_nodes", "json", storage)
    assert (code, out) == (1, "")
    assert "REJECTED" in err and "holds no data objects" in err
    assert storage.bytes_written == {}


def test_a_listing_that_cannot_be_written_prints_no_job_and_says_what_to_do() -> None:
    storage = Refusing()
    storage.put("datasets/web-small/part-0.txt", b"x")
    code, out, err = export("own_image", "yaml", storage)
    assert (code, out) == (2, "")
    assert "cannot write the dataset listing" in err and "storage.objects.create" in err
    assert f"gs://{ARTIFACTS[0]}/" in err and "gcloud auth application-default login" in err


def test_the_built_in_trainer_s_export_touches_no_storage() -> None:
    code, out, err = export("one_gpu", "json", Untouchable())
    assert code == 0, err
    assert "LANDFALL_DATA_FILES" not in out and "wrote the dataset listing" not in err
