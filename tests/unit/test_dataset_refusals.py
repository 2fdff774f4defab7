"""Refuse before paying: an empty dataset, and a tabular dataset without its label column, are REJECTED
by the dispatcher before any plan or CreateCustomJob; a container's run gets the dataset's listing."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from functions.dispatch.dataset_check import HEADER_BYTES, check_dataset, read_head_ahead
from functions.errors import TransientError
from schemas.data_objects import DataObject, objects_digest
from schemas.run_record import RunState
from schemas.training_request import parse_training_request
from tests.fakes.ingest import SETTINGS, FakeObjects
from tests.fakes.world import World

PREFIX = "datasets/churn/"


def request(**changes: Any) -> Any:
    data: dict[str, Any] = {
        "idempotency_key": "k-1",
        "dataset": {"uri": f"gs://landfall-landing/{PREFIX}"},
        "task": "tabular-classification",
        "model": {"preset": "mlp-small", "label_column": "churned"},
        **changes,
    }
    return parse_training_request(data)


def test_a_prefix_with_only_control_files_is_an_empty_dataset() -> None:
    objects = FakeObjects()
    objects.put(PREFIX + "_SUCCESS", b"")
    objects.put(PREFIX + "_temporary/part-0.csv", b"a,churned\n1,0\n")
    refusal = check_dataset(request(), objects, SETTINGS)
    assert refusal is not None and refusal.code == "empty-dataset" and "holds no data objects" in refusal.reason


def test_a_missing_label_column_is_refused_naming_the_columns() -> None:
    objects = FakeObjects()
    objects.put(PREFIX + "part-1.csv", b"tenure,plan,label\n1,a,0\n")
    objects.put(PREFIX + "part-0.csv", b"tenure,plan,label\n3,b,1\n")
    refusal = check_dataset(request(), objects, SETTINGS)
    assert refusal is not None and refusal.code == "missing-label-column"
    assert "'churned' is not a column of gs://landfall-landing/datasets/churn/part-0.csv" in refusal.reason
    assert "'tenure', 'plan', 'label'" in refusal.reason
    objects.put(PREFIX + "part-0.csv", b"tenure,plan,churned\n3,b,1\n")
    assert check_dataset(request(), objects, SETTINGS) is None


def megabyte_shard(header: bytes) -> bytes:
    """A CSV shard of about 1 MB, as real tabular data is: far past the head the check reads."""
    rows = b"".join(b"%d,plan-%d,%d\n" % (i, i % 7, i % 2) for i in range(70_000))
    assert len(rows) > 10 * HEADER_BYTES
    return header + rows


def test_a_first_shard_of_a_megabyte_is_checked_on_its_head() -> None:
    objects = FakeObjects()
    objects.put(PREFIX + "part-0.csv", megabyte_shard(b"tenure,plan,churned\n"))
    assert check_dataset(request(), objects, SETTINGS) is None, "any size of shard is valid data"
    objects.put(PREFIX + "part-0.csv", megabyte_shard(b"tenure,plan,label\n"))
    refusal = check_dataset(request(), objects, SETTINGS)
    assert refusal is not None and refusal.code == "missing-label-column"
    assert "'tenure', 'plan', 'label'" in refusal.reason


def test_a_header_longer_than_the_head_read_is_left_to_the_trainer() -> None:
    objects = FakeObjects()
    header = b",".join(b"feature_%06d" % i for i in range(HEADER_BYTES // 10)) + b"\n"
    objects.put(PREFIX + "part-0.csv", header + b"1,2\n")
    assert check_dataset(request(), objects, SETTINGS) is None, "a cut header names no columns to refuse on"


def test_own_code_is_not_held_to_a_label_column_and_a_container_gets_the_listing() -> None:
    objects = FakeObjects()
    info = objects.put(PREFIX + "part-0.csv", b"x,y\n1,2\n")
    image = {"image_uri": SETTINGS.allowed_image_prefixes[0] + "team:1"}
    own = request(trainer=image, workload={"parameters": 1000})
    assert check_dataset(own, objects, SETTINGS) is None
    listing = objects.content[f"runs/{own.run_id}/data-files.jsonl"].decode().splitlines()
    assert [json.loads(line) for line in listing] == [
        {"name": "part-0.csv", "generation": info.generation, "size": info.size}
    ]


def test_a_script_gets_the_version_its_request_carries_not_what_landed_after_the_cut() -> None:
    objects = FakeObjects()
    cut = objects.put(PREFIX + "part-0.csv", b"x,y\n1,2\n")
    objects.put(PREFIX + "part-1.csv", b"x,y\n3,4\n")  # landed after the version was cut: the next version's
    snapshot = {"name": "part-0.csv", "generation": cut.generation, "size": cut.size}
    script = {"script": f"gs://{SETTINGS.code_bucket}/scripts/train.py"}
    digest = objects_digest([DataObject("part-0.csv", cut.generation, cut.size)])
    dataset = {"uri": f"gs://landfall-landing/{PREFIX}", "objects": [snapshot], "objects_digest": digest}
    own = request(trainer=script, workload={"parameters": 1000}, dataset=dataset)
    assert check_dataset(own, objects, SETTINGS) is None
    listing = objects.content[f"runs/{own.run_id}/data-files.jsonl"].decode().splitlines()
    assert [json.loads(line) for line in listing] == [snapshot]


def test_the_dispatcher_rejects_an_empty_dataset_without_planning_or_a_job() -> None:
    world = World()
    objects = FakeObjects()
    world.dispatch_deps = replace(world.dispatch_deps, objects=objects)
    assert world.deliver(request().to_json()) == "rejected:empty-dataset"
    run = world.run(request().run_id)
    assert run.state == RunState.REJECTED and run.error is not None and run.error.code == "empty-dataset"
    assert world.planned == [] and world.vertex.create_calls == []
    objects.put(PREFIX + "part-0.csv", b"tenure,churned\n1,0\n")  # the same request once data is there is planned
    fresh = request(idempotency_key="k-2")
    assert world.deliver(fresh.to_json(), message_id="m-2") != "rejected:empty-dataset"
    assert world.planned == [fresh.run_id]


def test_own_code_breaking_a_rule_is_rejected_by_the_dispatcher_with_no_plan_and_no_job() -> None:
    world = World()
    cases: dict[str, dict[str, Any]] = {
        "image": {"trainer": {"image_uri": "docker.io/someone/miner:1"}, "workload": {"parameters": 10}},
        "script": {"trainer": {"script": "gs://elsewhere/train.py"}, "workload": {"parameters": 10}},
        "size": {"trainer": {"script": f"gs://{SETTINGS.code_bucket}/train.py"}},
    }
    rules = {"image": "not under an allowed image prefix", "script": "outside the code bucket", "size": "four ways"}
    for name, changes in cases.items():
        req = request(idempotency_key=f"own-{name}", model={}, **changes)
        assert world.deliver(req.to_json(), message_id=name) == "rejected:invalid-request"
        run = world.run(req.run_id)
        assert run.state == RunState.REJECTED and run.error is not None and rules[name] in run.error.message
    assert world.planned == [] and world.vertex.create_calls == []


class ListingCountingObjects(FakeObjects):
    def __init__(self) -> None:
        super().__init__()
        self.listings = 0

    def list(self, bucket: str, prefix: str) -> Any:
        self.listings += 1
        return super().list(bucket, prefix)


def _carrying(*infos: Any) -> dict[str, Any]:
    """A dataset as ingest publishes it: the version's list and its digest."""
    listed = [DataObject(i.name[len(PREFIX) :], i.generation, i.size) for i in infos]
    return {
        "uri": f"gs://landfall-landing/{PREFIX}",
        "objects": [{"name": o.name, "generation": o.generation, "size": o.size} for o in listed],
        "objects_digest": objects_digest(listed),
    }


def test_a_request_carrying_its_versions_list_is_checked_on_that_list_without_listing_the_bucket() -> None:
    objects = ListingCountingObjects()
    first = objects.put(PREFIX + "part-0.csv", b"tenure,plan,label\n3,b,1\n")
    second = objects.put(PREFIX + "part-1.csv", b"tenure,plan,churned\n1,a,0\n")
    refusal = check_dataset(request(dataset=_carrying(second, first)), objects, SETTINGS)
    assert refusal is not None and refusal.code == "missing-label-column", "the first shard by name, as listed"
    assert "gs://landfall-landing/datasets/churn/part-0.csv" in refusal.reason
    assert check_dataset(request(dataset=_carrying(second)), objects, SETTINGS) is None
    assert objects.listings == 0
    assert check_dataset(request(), objects, SETTINGS) is not None and objects.listings == 1, "no list: listed"


def test_the_listing_is_written_in_every_job_regions_artifacts_bucket() -> None:
    """The listing is written before the plan picks a region, and a job reads it from its own region's artifacts
    bucket (a fallback may move it to another): every region the deployment runs jobs in gets it, once."""
    objects = FakeObjects()
    objects.put(PREFIX + "part-0.csv", b"x,y\n1,2\n")
    regions = replace(
        SETTINGS,
        artifact_buckets=(("europe-west4", "art-eu"), ("asia-southeast1", "art-asia"), ("us-central1", "art-us")),
    )
    own = request(trainer={"script": f"gs://{SETTINGS.code_bucket}/scripts/train.py"}, workload={"parameters": 1000})
    assert check_dataset(own, objects, regions) is None
    name = f"runs/{own.run_id}/data-files.jsonl"
    expected = {dict(regions.artifact_buckets).get(r, regions.output_bucket) for r in regions.job_regions}
    assert sorted(objects.written) == sorted((bucket, name) for bucket in expected)
    assert {"art-eu", "art-asia"} <= expected and len(objects.written) == len(expected)


class HeadCountingObjects(FakeObjects):
    def __init__(self) -> None:
        super().__init__()
        self.heads: list[str] = []

    def read_head(self, bucket: str, name: str, generation: str, max_bytes: int) -> bytes | None:
        self.heads.append(name)
        return super().read_head(bucket, name, generation, max_bytes)


def test_the_header_read_ahead_is_the_one_the_check_takes_and_it_is_not_read_twice() -> None:
    objects = HeadCountingObjects()
    first = objects.put(PREFIX + "part-0.csv", b"tenure,plan,label\n3,b,1\n")
    second = objects.put(PREFIX + "part-1.csv", b"tenure,plan,churned\n1,a,0\n")
    carried = request(dataset=_carrying(second, first))
    ahead = read_head_ahead(carried, objects)
    assert ahead is not None and ahead.object.name == PREFIX + "part-0.csv", "the shard the check reads: first by name"
    refusal = check_dataset(carried, objects, SETTINGS, ahead)
    assert refusal is not None and refusal.code == "missing-label-column"
    assert objects.heads == [PREFIX + "part-0.csv"], "read once, ahead"
    # A read ahead of another shard (the request changed since) is not taken for this one.
    other = read_head_ahead(request(dataset=_carrying(second)), objects)
    assert other is not None and check_dataset(carried, objects, SETTINGS, other) is not None
    assert objects.heads.count(PREFIX + "part-0.csv") == 2


def test_nothing_is_read_ahead_without_a_list_or_for_a_teams_code() -> None:
    objects = HeadCountingObjects()
    shard = objects.put(PREFIX + "part-0.csv", b"tenure,plan,churned\n1,a,0\n")
    assert read_head_ahead(request(), objects) is None, "no list: the shard is found by listing, in the check"
    script = request(dataset=_carrying(shard), trainer={"script": "gs://landfall-code/train.py"})
    assert read_head_ahead(script, objects) is None
    assert objects.heads == []


def test_a_failed_read_ahead_fails_the_check_with_the_reads_own_error() -> None:
    class Failing(FakeObjects):
        def read_head(self, bucket: str, name: str, generation: str, max_bytes: int) -> bytes | None:
            raise TransientError("Cloud Storage: reading the head failed; retried")

    objects = Failing()
    shard = objects.put(PREFIX + "part-0.csv", b"tenure,plan,churned\n1,a,0\n")
    carried = request(dataset=_carrying(shard))
    ahead = read_head_ahead(carried, objects)
    with pytest.raises(TransientError, match="reading the head failed"):
        check_dataset(carried, objects, SETTINGS, ahead)
