"""`landfall submit`, `landfall runs` (--state, --dataset, --since, --json) and `landfall run` (--json) against the
Firestore and Pub/Sub emulators. Run documents are the golden run record with changes, written with the official
client as Landfall stores them (RunRecord.to_document(): times as Firestore timestamps); one older document keeps
its times as RFC 3339 text and still reads."""

from __future__ import annotations

import argparse
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.topology import load_topology
from landfall.cli import build_parser
from landfall.errors import CommandError
from schemas.run_record import parse_run_record
from tests.conftest import PROJECT, Emulator

pytestmark = pytest.mark.filterwarnings("ignore:The return_immediately flag is deprecated:DeprecationWarning")
GOLDEN: dict[str, Any] = json.loads((Path(__file__).parents[2] / "schemas/examples/run_record.json").read_text())
EPOCHS = [{"epoch": 1, "loss": 0.9, "accuracy": 0.6}, {"epoch": 2, "loss": 0.3, "accuracy": 0.9}]


@pytest.fixture()
def settings_env(clean_firestore: Emulator) -> Iterator[None]:
    from functions.settings import get_settings

    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def landfall(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    args: argparse.Namespace = build_parser().parse_args(argv)
    code = args.func(args)
    return code, capsys.readouterr().out


def run_doc(run_id: str, state: str, created_at: str, uri: str) -> dict[str, Any]:
    """The golden record with these changes, in its JSON form (times as RFC 3339 text)."""
    doc = copy.deepcopy(GOLDEN)
    doc.update(run_id=run_id, state=state, created_at=created_at)
    doc["request"]["dataset"]["uri"] = uri
    if isinstance(doc.get("metrics"), dict):
        doc["metrics"]["epochs"] = EPOCHS
    return doc


@pytest.fixture()
def three_runs(settings_env: None) -> None:
    from google.cloud import firestore

    collection = firestore.Client(project=PROJECT).collection(load_topology().runs_collection)
    for doc in (
        run_doc("run-a", "SUCCEEDED", "2026-11-20T10:00:00.000000Z", "gs://b/churn/"),
        run_doc("run-b", "FAILED", "2026-11-21T10:00:00.000000Z", "gs://b/churn/"),
        run_doc("run-c", "SUCCEEDED", "2026-11-22T10:00:00.000000Z", "gs://b/other/"),
    ):
        collection.document(doc["run_id"]).set(parse_run_record(doc).to_document())


def _ids(out: str) -> list[str]:
    return [doc["run_id"] for doc in json.loads(out)]


def test_runs_newest_first_and_each_filter(three_runs: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert _ids(landfall(["runs", "--json"], capsys)[1]) == ["run-c", "run-b", "run-a"]
    assert _ids(landfall(["runs", "--state", "succeeded", "--json"], capsys)[1]) == ["run-c", "run-a"]
    assert _ids(landfall(["runs", "--dataset", "gs://b/churn/", "--json"], capsys)[1]) == ["run-b", "run-a"]
    assert _ids(landfall(["runs", "--since", "2026-11-21T11:00:00+01:00", "--json"], capsys)[1]) == ["run-c", "run-b"]
    assert _ids(
        landfall(
            ["runs", "--state", "SUCCEEDED", "--dataset", "gs://b/churn/", "--since", "2026-11-01T00:00:00Z", "--json"],
            capsys,
        )[1]
    ) == ["run-a"]
    code, table = landfall(["runs"], capsys)
    assert code == 0 and table.index("run-c") < table.index("run-b") < table.index("run-a")
    assert (
        "no runs match state == FAILED, request.dataset.uri == gs://b/other/"
        in landfall(["runs", "--state", "FAILED", "--dataset", "gs://b/other/"], capsys)[1]
    )


def test_run_shows_timeline_and_loss_curve_and_json_is_the_document(
    three_runs: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, text = landfall(["run", "run-a"], capsys)
    assert code == 0 and "timeline:" in text and "state     SUCCEEDED" in text
    if GOLDEN.get("metrics"):
        assert "loss per epoch" in text
    code, out = landfall(["run", "run-a", "--json"], capsys)
    assert json.loads(out)["run_id"] == "run-a" and json.loads(out)["request"]["dataset"]["uri"] == "gs://b/churn/"
    assert json.loads(out)["created_at"] == "2026-11-20T10:00:00.000000Z"  # the stored timestamp, as RFC 3339


def test_times_are_stored_as_timestamps_and_older_text_documents_still_read(
    three_runs: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from datetime import UTC, datetime

    from google.cloud import firestore

    collection = firestore.Client(project=PROJECT).collection(load_topology().runs_collection)
    stored = collection.document("run-a").get().to_dict()
    assert stored is not None, "run-a is not stored"
    assert stored["created_at"] == datetime(2026, 11, 20, 10, tzinfo=UTC)
    assert all(isinstance(h["at"], datetime) for h in stored["history"])
    collection.document("run-old").set(run_doc("run-old", "FAILED", "2026-10-01T10:00:00.000000Z", "gs://b/x/"))
    code, text = landfall(["run", "run-old"], capsys)
    assert code == 0 and "state     FAILED" in text
    assert _ids(landfall(["runs", "--dataset", "gs://b/x/", "--json"], capsys)[1]) == ["run-old"]


def test_submit_publishes_a_minimal_request_and_prints_its_run_id(
    pubsub_emulator: Emulator, settings_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from google.cloud import pubsub_v1

    from deploy.local import provision
    from schemas.training_request import parse_training_request

    topology = load_topology()
    provision.create_topics(topology, PROJECT)
    subscriber = pubsub_v1.SubscriberClient()
    subscription = f"projects/{PROJECT}/subscriptions/submit-tap"
    subscriber.create_subscription(name=subscription, topic=f"projects/{PROJECT}/topics/{topology.requests_topic}")
    path = tmp_path / "request.json"
    path.write_text(
        json.dumps(
            {"dataset": {"uri": "gs://b/churn/"}, "task": "tabular-classification", "model": {"preset": "mlp-small"}}
        )
    )
    try:
        code, out = landfall(["submit", str(path), "--json"], capsys)
        printed = json.loads(out)
        received = subscriber.pull(subscription=subscription, max_messages=1, timeout=30).received_messages
        assert code == 0 and parse_training_request(received[0].message.data).run_id == printed["run_id"]
    finally:
        subscriber.delete_subscription(subscription=subscription)
        subscriber.close()
    path.write_text(
        json.dumps(
            {
                "dataset": {"uri": "gs://b/churn/", "object_count": "four"},
                "task": "tabular-classification",
                "model": {"preset": "mlp-small"},
            }
        )
    )
    with pytest.raises(CommandError, match=r"dataset\.object_count"):
        landfall(["submit", str(path)], capsys)


def test_the_run_document_page_queries_run_as_written(three_runs: None, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/run-document.md: its query block, run on the emulator against the three runs (its dataset URI swapped
    for theirs), returns what `landfall runs` with the same filters returns."""
    page = (Path(__file__).parents[2] / "docs" / "run-document.md").read_text()
    block = page[page.index("```python\nfrom datetime") :].split("```")[1].removeprefix("python\n")
    code = block.replace('"PROJECT"', repr(PROJECT)).replace("gs://landfall-landing/datasets/churn/", "gs://b/churn/")
    names: dict[str, Any] = {}
    exec(compile(code, "docs/run-document.md", "exec"), names)
    assert capsys.readouterr().out.split()[0] == "run-b"

    def ids(query: Any) -> list[str]:
        return [s.id for s in query.stream()]

    assert ids(names["failed"]) == _ids(landfall(["runs", "--state", "FAILED", "--json"], capsys)[1]) == ["run-b"]
    assert ids(names["churn"]) == _ids(landfall(["runs", "--dataset", "gs://b/churn/", "--json"], capsys)[1])
    assert ids(names["one_day"]) == ["run-c"]
    assert ids(names["recent_failures"]) == ["run-b"]


def test_runs_table_gives_the_reason_a_run_failed(three_runs: None, capsys: pytest.CaptureFixture[str]) -> None:
    """`landfall runs` says why each run that ended badly failed, in a column of its own."""
    from dataclasses import replace

    from google.cloud import firestore

    from schemas.run_record import RunError

    failed = parse_run_record(run_doc("run-b", "FAILED", "2026-11-21T10:00:00.000000Z", "gs://b/churn/"))
    failed = replace(failed, error=RunError("job-failed", "no label column", reason="bad-data"))
    firestore.Client(project=PROJECT).collection(load_topology().runs_collection).document("run-b").set(
        failed.to_document()
    )
    code, table = landfall(["runs"], capsys)
    header, _, *rows = table.splitlines()
    assert code == 0 and header.split()[-1] == "REASON"
    by_run = {row.split()[0]: row for row in rows}
    assert by_run["run-b"].rstrip().endswith("bad-data")
    assert not by_run["run-a"].rstrip().endswith("bad-data")


def test_runs_shows_each_tasks_own_figures_and_flags_a_warned_run(
    settings_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A regression run reads R² and RMSE in `landfall runs` (not an empty accuracy column), a
    classification run its accuracy; a run the trainer warned about is flagged, and `landfall run` says why."""
    from google.cloud import firestore

    collection = firestore.Client(project=PROJECT).collection(load_topology().runs_collection)
    regression = run_doc("run-reg", "SUCCEEDED", "2026-11-23T10:00:00.000000Z", "gs://b/regression/houses/")
    regression["request"]["task"] = "tabular-regression"
    regression["metrics"] = {
        "final": {"loss": 0.42, "accuracy": None, "perplexity": None, "r2": 0.58, "rmse": 53.1},
        "epochs": [{"epoch": 1, "loss": 0.42, "accuracy": None, "perplexity": None, "r2": 0.58, "rmse": 53.1}],
        "warnings": [{"code": "small-held-out", "message": "the held-out figures are measured on 24 rows"}],
    }
    classification = run_doc("run-cls", "SUCCEEDED", "2026-11-22T10:00:00.000000Z", "gs://b/datasets/churn/")
    classification["metrics"] = {"final": {"loss": 0.1, "accuracy": 0.975, "perplexity": None}, "epochs": EPOCHS}
    for doc in (regression, classification):
        collection.document(doc["run_id"]).set(parse_run_record(doc).to_document())
    code, table = landfall(["runs"], capsys)
    lines = table.splitlines()
    assert code == 0 and "METRIC" in lines[0]
    assert next(line for line in lines if "run-reg" in line).rstrip().endswith("R² 0.58, RMSE 53.1 !")
    assert next(line for line in lines if "run-cls" in line).rstrip().endswith("accuracy 0.975")
    code, text = landfall(["run", "run-reg"], capsys)
    assert "metrics   loss 0.42, R² 0.58, RMSE 53.1" in text
    assert "warning   small-held-out: the held-out figures are measured on 24 rows" in text
