"""`landfall datasets`, `landfall dataset URI` and `landfall sweep` against the Firestore and Pub/Sub emulators.
Dataset documents are written directly with the official client, shaped as schemas/dataset_record.py says."""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from deploy.topology import load_topology
from landfall.cli import build_parser
from schemas.dataset_record import DATASET_FIELDS, SCHEMA_VERSION, dataset_id_for
from tests.conftest import PROJECT, Emulator

BUCKET = "landfall-landing"
LONG_REASON = (
    "route tabular needs at least 2 data objects and found 1; land more shards under the prefix, then a "
    "new _SUCCESS marker\n(objects seen: part-00000.csv)"
)


@pytest.fixture()
def settings_env(clean_firestore: Emulator) -> Iterator[None]:
    """Settings read afresh from the emulator environment of this session."""
    from functions.settings import get_settings

    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    args: argparse.Namespace = build_parser().parse_args(argv)
    code = args.func(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def dataset_doc(
    prefix: str, status: str, updated_at: str, *, route: str = "tabular", reason: str = "", run_id: str | None = None
) -> dict[str, Any]:
    version = None
    if run_id:
        version = {
            "idempotency_key": f"gcs:{BUCKET}/{prefix}:17",
            "run_id": run_id,
            "completed_by": "marker",
            "generation": "17",
            "kind": "marker",
            "status": "PUBLISHED",
        }
    doc = {
        "schema_version": SCHEMA_VERSION,
        "dataset_id": dataset_id_for(BUCKET, prefix),
        "bucket": BUCKET,
        "prefix": prefix,
        "uri": f"gs://{BUCKET}/{prefix}",
        "route": route,
        "status": status,
        "reason": reason,
        "updated_at": updated_at,
        "version": version,
    }
    assert tuple(doc) == DATASET_FIELDS
    return doc


def write(*docs: dict[str, Any]) -> None:
    from google.cloud import firestore

    collection = firestore.Client(project=PROJECT).collection(load_topology().datasets_collection)
    for doc in docs:
        collection.document(doc["dataset_id"]).set(doc)


@pytest.fixture()
def three_datasets(settings_env: None) -> list[dict[str, Any]]:
    docs = [
        dataset_doc("datasets/old/", "REQUESTED", "2026-11-20T10:00:00Z", run_id="run-0123456789abcdef"),
        dataset_doc("datasets/refused/", "REFUSED", "2026-11-22T09:30:00.250000Z", reason=LONG_REASON),
        dataset_doc("datasets/collecting/", "COLLECTING", "2026-11-21T08:00:00Z", route="logs"),
    ]
    write(*docs)
    return docs


def test_no_datasets_yet(settings_env: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["datasets"], capsys) == (0, "no datasets yet\n", "")
    assert run(["datasets", "--status", "waiting"], capsys) == (0, "no datasets with status WAITING\n", "")


def test_table_is_newest_first_with_run_and_a_cut_reason(
    three_datasets: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["datasets"], capsys)
    lines = out.splitlines()
    assert code == 0
    assert lines[0].split() == ["DATASET", "ROUTE", "STATUS", "RUN", "UPDATED", "REASON"]
    assert [line.split()[0] for line in lines[2:]] == [
        f"gs://{BUCKET}/datasets/{name}/" for name in ("refused", "collecting", "old")
    ]
    assert "run-0123456789abcdef" in lines[4] and "REQUESTED" in lines[4]
    reason_cell = lines[2][lines[0].index("REASON") :]
    assert len(reason_cell) == 80 and reason_cell.endswith("...") and "\n" not in reason_cell
    assert reason_cell.startswith("route tabular needs at least 2 data objects")


def test_json_holds_the_whole_records(three_datasets: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["datasets", "--json"], capsys)
    assert code == 0
    assert json.loads(out) == [three_datasets[1], three_datasets[2], three_datasets[0]]


def test_status_filter_and_limit(three_datasets: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    write(dataset_doc("datasets/refused-too/", "REFUSED", "2026-11-19T00:00:00Z", reason="manifest is not JSON"))
    code, out, _ = run(["datasets", "--status", "refused", "--json"], capsys)
    assert code == 0 and [d["prefix"] for d in json.loads(out)] == ["datasets/refused/", "datasets/refused-too/"]
    code, out, _ = run(["datasets", "--status", "REFUSED", "--limit", "1", "--json"], capsys)
    assert [d["prefix"] for d in json.loads(out)] == ["datasets/refused/"]
    code, out, _ = run(["datasets", "--limit", "2", "--json"], capsys)
    assert [d["prefix"] for d in json.loads(out)] == ["datasets/refused/", "datasets/collecting/"]


def test_one_dataset_in_full_with_the_next_step(
    three_datasets: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["dataset", f"gs://{BUCKET}/datasets/refused"], capsys)  # the trailing '/' may be left out
    assert code == 0
    assert f"dataset   gs://{BUCKET}/datasets/refused/" in out
    assert "status    REFUSED" in out and "version   none yet" in out
    assert "reason    route tabular needs at least 2 data objects and found 1; land more shards" in out
    assert "          (objects seen: part-00000.csv)" in out
    assert "next      fix what the reason says" in out

    code, out, _ = run(["dataset", f"gs://{BUCKET}/datasets/old/"], capsys)
    assert "version   run          run-0123456789abcdef" in out
    assert f"key          gcs:{BUCKET}/datasets/old/:17" in out
    assert "next      a TrainingRequest was published; `landfall run run-0123456789abcdef` follows the run" in out

    code, out, _ = run(["dataset", f"gs://{BUCKET}/datasets/old/", "--json"], capsys)
    assert code == 0 and json.loads(out) == three_datasets[0]


def test_fields_beyond_the_contract_are_shown_too(settings_env: None, capsys: pytest.CaptureFixture[str]) -> None:
    doc = dataset_doc("datasets/extra/", "COLLECTING", "2026-11-22T09:30:00Z") | {"last_object_at": "2026-11-22T09:29Z"}
    write(doc)
    code, out, _ = run(["dataset", f"gs://{BUCKET}/datasets/extra/"], capsys)
    assert code == 0 and "last_object_at 2026-11-22T09:29Z" in out
    assert "next      objects are arriving; the sweep closes the dataset" in out


def test_a_record_that_does_not_fit_its_schema_is_named_not_guessed(
    three_datasets: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    drifted = dataset_doc("datasets/drifted/", "REQUESTED", "2026-11-23T00:00:00Z") | {"status": "FINISHED"}
    write(drifted)
    code, out, err = run(["dataset", f"gs://{BUCKET}/datasets/drifted/"], capsys)
    assert code == 1 and out == ""
    assert "does not fit schemas/dataset_record.py: dataset.status: 'FINISHED' is not one of" in err
    code, out, err = run(["datasets", "--json"], capsys)  # the others are still listed; the exit status says so
    assert code == 1 and [d["prefix"] for d in json.loads(out)] == [
        "datasets/refused/",
        "datasets/collecting/",
        "datasets/old/",
    ]
    assert f"left out document {drifted['dataset_id']}" in err and "dataset.status" in err


def test_unknown_dataset_says_what_to_check(settings_env: None, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["dataset", f"gs://{BUCKET}/datasets/nope/"], capsys)
    assert code == 1 and out == ""
    assert f"no record of gs://{BUCKET}/datasets/nope/" in err
    assert dataset_id_for(BUCKET, "datasets/nope/") in err and "'datasets'" in err and PROJECT in err
    assert "`landfall datasets` lists the known ones" in err


def test_sweep_publishes_one_tick_to_the_sweep_topic(
    pubsub_emulator: Emulator, settings_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from google.cloud import pubsub_v1

    from deploy.local import provision

    topology = load_topology()
    provision.create_topics(topology, PROJECT)
    subscriber = pubsub_v1.SubscriberClient()
    path = subscriber.subscription_path(PROJECT, f"test-sweep-cli-{uuid.uuid4().hex[:8]}")
    subscriber.create_subscription(
        request={"name": path, "topic": f"projects/{PROJECT}/topics/{topology.ingest_sweep_topic}"}
    )
    code, out, _ = run(["sweep"], capsys)
    assert code == 0
    topic = f"projects/{PROJECT}/topics/{topology.ingest_sweep_topic}"
    assert out.startswith(f"published one ingest_sweep tick to {topic}: message id ")
    message_id = out.split()[-1]

    received: list[Any] = []
    deadline = time.monotonic() + 20
    while not received and time.monotonic() < deadline:
        received = list(
            subscriber.pull(request={"subscription": path, "max_messages": 10}, timeout=5).received_messages
        )
    subscriber.close()
    assert [m.message.message_id for m in received] == [message_id]
    assert json.loads(received[0].message.data)["schedule"] == "ingest_sweep"
    assert dict(received[0].message.attributes) == {"schedule": "ingest_sweep"}


def test_sweep_to_a_missing_topic_says_how_to_create_it(
    pubsub_emulator: Emulator, settings_env: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from functions.settings import get_settings

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "landfall-no-topics")
    get_settings.cache_clear()
    from landfall.errors import CommandError

    with pytest.raises(CommandError) as refused:  # landfall.cli prints it as one line, `landfall sweep: ...`
        run(["sweep"], capsys)
    assert capsys.readouterr().out == ""
    assert (
        "topic projects/landfall-no-topics/topics/landfall-ingest-sweep does not exist: `landfall up` creates"
        in str(refused.value)
    )


def test_a_refused_dataset_names_no_run(settings_env: None, capsys: pytest.CaptureFixture[str]) -> None:
    """A REFUSED version published no request, so the run id its request would have had names no
    run; neither the table nor `landfall dataset` shows it."""
    doc = dataset_doc("datasets/refused/", "REFUSED", "2026-11-22T09:30:00Z", reason="0 data objects")
    doc["version"] = {
        "idempotency_key": f"gcs:{BUCKET}/datasets/refused/:17",
        "run_id": "run-00000000000000000017",
        "completed_by": "marker",
        "generation": "17",
        "kind": "marker",
        "status": "REFUSED",
    }
    write(doc)
    code, out, _ = run(["datasets"], capsys)
    assert code == 0 and "run-00000000000000000017" not in out
    code, out, _ = run(["dataset", doc["uri"]], capsys)
    assert code == 0 and "run-00000000000000000017" not in out and "status    REFUSED" in out
    code, out, _ = run(["datasets", "--json"], capsys)
    assert json.loads(out)[0]["version"]["run_id"] == "run-00000000000000000017"  # the stored record, unchanged
