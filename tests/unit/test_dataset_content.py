"""The same bytes are not trained twice by accident. A dataset version is identified by its content (the
names, sizes and checksums of its data objects and landfall.json); a version whose content was published before is
a DUPLICATE of that run, and `landfall retrain URI` asks for a new run on purpose. Exactly once holds under
concurrent versions."""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta

import pytest
from google.api_core.exceptions import InvalidArgument

from deploy.routes import Route
from functions.errors import TransientError
from functions.gcp.gcs_objects import ObjectInfo
from functions.ingest.readiness import scan_prefix
from functions.ingest.retrain import RetrainError, retrain
from landfall.cli import build_parser
from landfall.commands import datasets as datasets_cli
from schemas.dataset_record import DatasetStatus, VersionStatus, content_key_for, parse_dataset_record
from tests.fakes.ingest import BUCKET, T0, World, version_stub

MARKED = Route(
    name="marked",
    bucket="*",
    prefix="datasets/",
    task="tabular-classification",
    model_preset="mlp-small",
    overridable=("hyperparameters.*",),
)
QUIET = Route(
    name="quiet",
    bucket="*",
    prefix="exports/",
    task="tabular-classification",
    model_preset="mlp-small",
    readiness=("quiet-period",),
    quiet_period_seconds=60,
)
ROUTES = (MARKED, QUIET)
URI = f"gs://{BUCKET}/datasets/a/"


def trained_once() -> tuple[World, str]:
    """A dataset of two shards, marked complete and published once; returns the world and its run id."""
    w = World(ROUTES)
    w.upload("datasets/a/part-0.csv", b"x,label\n1,0\n")
    w.upload("datasets/a/part-1.csv", b"x,label\n2,1\n")
    outcome = w.upload("datasets/a/_SUCCESS", b"")
    assert outcome.startswith("published:")
    return w, outcome.split(":", 1)[1]


def test_the_marker_uploaded_again_over_the_same_objects_is_a_duplicate_naming_the_run() -> None:
    w, run = trained_once()
    assert w.upload("datasets/a/_SUCCESS", b"") == f"same-content:{run}"  # on main: a second request
    assert len(w.published) == 1
    doc = w.dataset("datasets/a/")
    assert doc["status"] == DatasetStatus.DUPLICATE
    assert doc["version"]["duplicate_of"] == run and doc["version"]["status"] == VersionStatus.DUPLICATE
    assert f"the same objects as the version trained as run {run}" in doc["reason"]
    assert f"`landfall retrain {URI}`" in doc["reason"]
    version = w.datasets.versions[doc["version"]["run_id"]]
    assert (version["status"], version["duplicate_of"]) == ("DUPLICATE", run)
    # Its own redelivery is settled like any final version.
    assert w.deliver("datasets/a/_SUCCESS", doc["version"]["generation"]) == "duplicate:DUPLICATE"


def test_an_export_rewriting_identical_objects_is_a_duplicate_and_a_changed_byte_is_not() -> None:
    w, run = trained_once()
    w.upload("datasets/a/part-0.csv", b"x,label\n1,0\n")  # new generations, same bytes
    w.upload("datasets/a/part-1.csv", b"x,label\n2,1\n")
    assert w.upload("datasets/a/_SUCCESS", b"") == f"same-content:{run}"
    w.upload("datasets/a/part-1.csv", b"x,label\n3,1\n")  # same size, other bytes: another crc32c
    assert w.upload("datasets/a/_SUCCESS", b"").startswith("published:")
    assert len(w.published) == 2
    assert w.dataset("datasets/a/")["status"] == DatasetStatus.REQUESTED


def test_a_changed_landfall_json_is_new_content_and_control_objects_are_not_content() -> None:
    w, _ = trained_once()
    w.upload("datasets/a/_temporary/part-9.csv", b"scratch")
    w.upload("datasets/a/_MANIFEST.json.bak", b"{}")
    assert w.upload("datasets/a/_SUCCESS", b"").startswith("same-content:")
    w.upload("datasets/a/landfall.json", b'{"hyperparameters": {"epochs": 9}}')
    assert w.upload("datasets/a/_SUCCESS", b"").startswith("published:")
    assert [r.hyperparameters.epochs for r in w.requests()] == [5, 9]


def test_the_digest_is_names_sizes_and_checksums() -> None:
    def digest(*objects: ObjectInfo) -> str:
        return scan_prefix(iter(objects), "p/").content_digest

    base = digest(ObjectInfo("p/a.csv", 3, "1", "AAA="), ObjectInfo("p/b.csv", 4, "2", "BBB="))
    assert base == digest(
        ObjectInfo("p/a.csv", 3, "7", "AAA="),
        ObjectInfo("p/b.csv", 4, "8", "BBB="),
        ObjectInfo("p/_SUCCESS", 0, "9", "CCC="),
    )
    assert (
        len(
            {
                base,
                digest(ObjectInfo("p/a.csv", 3, "1", "AAA="), ObjectInfo("p/c.csv", 4, "2", "BBB=")),
                digest(ObjectInfo("p/a.csv", 3, "1", "AAA="), ObjectInfo("p/b.csv", 5, "2", "BBB=")),
                digest(ObjectInfo("p/a.csv", 3, "1", "AAA="), ObjectInfo("p/b.csv", 4, "2", "BBC=")),
                digest(ObjectInfo("p/a.csv", 3, "1", "AAA=")),
            }
        )
        == 5
    )
    # Without a crc32c the generation stands in: a rewrite is then new content.
    assert digest(ObjectInfo("p/a.csv", 3, "1")) != digest(ObjectInfo("p/a.csv", 3, "2"))


def test_forty_concurrent_versions_of_one_content_publish_once() -> None:
    """Distinct versions (markers written again and again, a sweep) racing on the same content: one run."""
    from functions.ingest.handler import complete
    from functions.ingest.readiness import Completion

    w = World(ROUTES)
    w.upload("datasets/a/part-0.csv")

    def version(i: int) -> str:
        c = Completion(BUCKET, "datasets/a/", MARKED, "marker", "datasets/a/_SUCCESS", str(5000 + i))
        while True:
            try:
                return complete(c, w.deps)
            except TransientError:
                continue

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(version, range(40)))
    assert len(w.published) == 1
    run = next(o for o in outcomes if o.startswith("published:")).split(":", 1)[1]
    assert sorted(set(outcomes)) == sorted({f"published:{run}", f"same-content:{run}"})


def test_a_version_refused_at_publish_does_not_hold_its_content() -> None:
    w = World(ROUTES)
    published = w.deps.publish

    def refusing(data: bytes) -> str:
        raise InvalidArgument("Message failed schema validation")

    w.deps = replace(w.deps, publish=refusing)
    w.upload("datasets/a/part-0.csv")
    assert w.upload("datasets/a/_SUCCESS", b"").startswith("refused:")
    w.deps = replace(w.deps, publish=published)  # the topic fixed: the same objects may now be trained
    assert w.upload("datasets/a/_SUCCESS", b"").startswith("published:")


def test_a_content_held_by_a_live_publish_is_retried_and_taken_over_once_its_lease_lapses() -> None:
    w = World(ROUTES)
    w.upload("datasets/a/part-0.csv")
    first = w.objects.put("datasets/a/_SUCCESS", b"")

    # A delivery killed mid-publish (no `except` runs) keeps its version and the content claimed until its lease
    # lapses: a newer version of the same objects is retried meanwhile, then takes the content over.
    from functions.ingest.handler import content_doc
    from functions.ingest.readiness import Completion
    from schemas.training_request import DatasetRef, run_id_for

    c = Completion(BUCKET, "datasets/a/", MARKED, "marker", "datasets/a/_SUCCESS", first.generation)
    w.datasets.claim_version(version_stub(run_id_for(c.idempotency_key)), owner="dead", now=T0, lease_seconds=60)
    digest = scan_prefix(w.objects.list(BUCKET, "datasets/a/"), "datasets/a/").content_digest
    w.datasets.claim_content(content_doc(c, run_id_for(c.idempotency_key), digest, DatasetRef(uri=URI), T0), now=T0)
    w.objects.put("datasets/a/_SUCCESS", b"")  # a newer marker over the same objects
    with pytest.raises(TransientError, match="another delivery is publishing now"):
        w.deliver("datasets/a/_SUCCESS", w.objects.objects["datasets/a/_SUCCESS"].generation)
    assert w.published == []
    w.clock.now = T0 + timedelta(seconds=61)
    assert w.deliver("datasets/a/_SUCCESS", w.objects.objects["datasets/a/_SUCCESS"].generation).startswith(
        "published:"
    )
    assert len(w.published) == 1


def test_quiet_period_export_rewritten_identically_is_a_duplicate() -> None:
    w = World(ROUTES)
    for i in range(2):
        w.upload(f"exports/d/part-{i}.csv", f"x,label\n{i},0\n".encode())
    w.clock.now += timedelta(seconds=61)
    assert w.sweep() == "swept: published=1"
    for i in range(2):  # the export job runs again and writes the same objects
        w.upload(f"exports/d/part-{i}.csv", f"x,label\n{i},0\n".encode())
    assert w.dataset("exports/d/")["status"] == DatasetStatus.COLLECTING
    w.clock.now += timedelta(seconds=61)
    assert w.sweep() == "swept: same-content=1"
    assert w.dataset("exports/d/")["status"] == DatasetStatus.DUPLICATE
    assert w.sweep() == "swept: nothing open"
    assert len(w.published) == 1


def test_retrain_publishes_a_new_run_under_a_content_derived_key_recorded_on_the_dataset() -> None:
    w, run = trained_once()
    w.upload("datasets/a/_SUCCESS", b"")  # a duplicate
    first = retrain(BUCKET, "datasets/a/", w.deps)
    assert first.outcome == f"published:{first.run_id}" and first.count == 1
    assert first.run_id != run
    digest = scan_prefix(w.objects.list(BUCKET, "datasets/a/"), "datasets/a/").content_digest
    assert first.idempotency_key == f"{content_key_for(BUCKET, 'datasets/a/', digest)}:retrain-1"
    request = w.requests()[-1]
    assert (request.idempotency_key, request.run_id, request.source.kind) == (
        first.idempotency_key,
        first.run_id,
        "retrain",
    )
    assert request.dataset.object_count == 2
    doc = w.dataset("datasets/a/")
    assert doc["status"] == DatasetStatus.REQUESTED
    assert {k: doc["version"][k] for k in ("kind", "run_id", "idempotency_key")} == {
        "kind": "retrain",
        "run_id": first.run_id,
        "idempotency_key": first.idempotency_key,
    }
    # The same objects marked again are now a duplicate of the retrained run; a second retrain is a third run.
    assert w.upload("datasets/a/_SUCCESS", b"") == f"same-content:{first.run_id}"
    second = retrain(BUCKET, "datasets/a/", w.deps)
    assert second.count == 2 and second.idempotency_key.endswith(":retrain-2")
    assert len({run, first.run_id, second.run_id}) == 3 and len(w.published) == 3
    content = w.datasets.content(doc["dataset_id"], digest)
    assert content is not None and content.retrains == 2


def test_retrain_refuses_what_it_cannot_train_with_the_reason() -> None:
    w = World(ROUTES)
    with pytest.raises(RetrainError, match="no record of gs://landfall-landing/datasets/none/"):
        retrain(BUCKET, "datasets/none/", w.deps)
    w.upload("exports/open/part-0.csv")
    with pytest.raises(RetrainError, match="is COLLECTING: it is not complete yet"):
        retrain(BUCKET, "exports/open/", w.deps)


def test_retrain_of_a_folder_that_now_breaks_a_rule_is_refused_and_recorded() -> None:
    w, _ = trained_once()
    del w.objects.objects["datasets/a/part-0.csv"], w.objects.objects["datasets/a/part-1.csv"]
    done = retrain(BUCKET, "datasets/a/", w.deps)
    assert done.outcome.startswith("refused:")
    assert "holds 0 data object(s)" in w.dataset("datasets/a/")["reason"]


def test_landfall_retrain_and_dataset_commands(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    w, run = trained_once()
    w.upload("datasets/a/_SUCCESS", b"")
    monkeypatch.setattr(datasets_cli, "_ingest_deps", lambda: w.deps)
    described = datasets_cli.describe_dataset(parse_dataset_record(w.dataset("datasets/a/")))
    assert "status    DUPLICATE" in described
    assert f"duplicate of {run}" in described
    assert (
        f"next      these objects were trained already as run {run} (`landfall run {run}`); `landfall retrain "
        f"{URI}` trains them again on purpose" in described
    )

    def cli(*argv: str) -> tuple[int, str, str]:
        args: argparse.Namespace = build_parser().parse_args(list(argv))
        code = args.func(args)
        out = capsys.readouterr()
        return code, out.out, out.err

    code, out, err = cli("retrain", "gs://landfall-landing/datasets/a")
    retrained = w.requests()[-1]
    assert (code, err) == (0, "")
    assert out == (
        f"retrain 1 of {URI}: requested run {retrained.run_id} (key {retrained.idempotency_key}); "
        f"`landfall run {retrained.run_id}` follows it\n"
    )
    assert cli("retrain", "gs://landfall-landing/datasets/none/")[:2] == (1, "")
    assert cli("retrain", "landfall-landing/datasets/a/")[0] == 2
