"""functions/gcp/known_documents.py against the Firestore emulator: a change on a fresh copy is one Commit with no
transaction; a copy another writer overtook (changed, created, deleted) is refused by Firestore and the change is
decided in a transaction on the stored document; and the ingest adapter's writes after a publish take that path."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from functions.gcp.datasets_store import DatasetsStore
from functions.gcp.firestore_tx import Doc
from functions.gcp.known_documents import KnownDocuments
from functions.records.dataset_versions import VersionOutcome
from schemas.content_record import ContentRecord
from schemas.dataset_record import VersionStatus
from schemas.dataset_version import DatasetVersion
from tests.conftest import PROJECT

NOW = datetime(2026, 11, 28, 15, 0, tzinfo=UTC)


class Counting:
    """The client, with how many transactions it began (each is a BeginTransaction, a read and a Commit)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.transactions = 0

    def transaction(self, **kwargs: Any) -> Any:
        self.transactions += 1
        return self._client.transaction(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


@pytest.fixture
def client(clean_firestore: Any) -> Counting:
    from google.cloud import firestore

    return Counting(firestore.Client(project=PROJECT))


def _count_to(n: int) -> Callable[[Doc | None], tuple[Doc | None, int]]:
    """Set `n` unless the stored count is already at least n; answers the count now stored."""

    def change(cur: Doc | None) -> tuple[Doc | None, int]:
        have = int((cur or {}).get("n", 0))
        if have >= n:
            return None, have
        return {**(cur or {}), "n": n}, n

    return change


def _kept(client: Counting, known: KnownDocuments, ref: Any) -> None:
    snapshot = ref.get()
    known.keep(ref.path, snapshot.to_dict() if snapshot.exists else None, snapshot.update_time)


def test_a_fresh_copy_is_changed_in_one_commit(client: Counting) -> None:
    known = KnownDocuments()
    ref = client.collection("known").document("a")
    ref.set({"n": 1, "keep": {"x": 1}})
    _kept(client, known, ref)
    assert known.change(client, ref, _count_to(2)) == 2
    assert client.transactions == 0
    assert ref.get().to_dict() == {"n": 2, "keep": {"x": 1}}
    # The Commit's result is the next precondition: a second change is one Commit again.
    assert known.change(client, ref, _count_to(3)) == 3
    assert client.transactions == 0
    assert ref.get().to_dict()["n"] == 3


def test_a_copy_known_absent_creates_in_one_commit(client: Counting) -> None:
    known = KnownDocuments()
    ref = client.collection("known").document("new")
    _kept(client, known, ref)
    assert known.change(client, ref, _count_to(1)) == 1
    assert client.transactions == 0
    assert ref.get().to_dict() == {"n": 1}


@pytest.mark.parametrize("overtaken_by", ["update", "create", "delete"])
def test_an_overtaken_copy_is_decided_on_the_stored_document(client: Counting, overtaken_by: str) -> None:
    known = KnownDocuments()
    ref = client.collection("known").document("b")
    if overtaken_by != "create":
        ref.set({"n": 1})
    _kept(client, known, ref)
    if overtaken_by == "delete":
        ref.delete()
    else:
        ref.set({"n": 5, "by": "other"})  # another writer, after the copy was kept
    got = known.change(client, ref, _count_to(3))
    assert client.transactions == 1
    stored = ref.get().to_dict()
    if overtaken_by == "delete":
        assert (got, stored) == (3, {"n": 3})
    else:
        assert got == 5, "the stored count decides, not the stale copy"
        assert stored == {"n": 5, "by": "other"}


def test_a_rule_that_writes_nothing_on_the_copy_asks_the_stored_document(client: Counting) -> None:
    known = KnownDocuments()
    ref = client.collection("known").document("c")
    ref.set({"n": 4})
    _kept(client, known, ref)
    ref.set({"n": 1})  # the copy says 4: the rule would write nothing on it
    assert known.change(client, ref, _count_to(3)) == 3
    assert client.transactions == 1
    assert ref.get().to_dict() == {"n": 3}


def test_without_a_copy_it_is_a_transaction(client: Counting) -> None:
    ref = client.collection("known").document("d")
    assert KnownDocuments().change(client, ref, _count_to(1)) == 1
    assert client.transactions == 1


def _version(run_id: str) -> DatasetVersion:
    return DatasetVersion(
        run_id=run_id,
        idempotency_key="gs://landing/datasets/known/_SUCCESS#17",
        dataset_id="ds-known",
        uri="gs://landing/datasets/known/",
        route="default",
        kind="marker",
        completed_by="gs://landing/datasets/known/_SUCCESS",
        generation="17",
        status=VersionStatus.CLAIMED,
    )


def test_ingest_finishes_a_version_it_claimed_without_a_transaction(client: Counting) -> None:
    store = DatasetsStore(client, "datasets", "dataset_versions")
    assert store.version("run-known", dataset_id="ds-known") is None  # the outbox read, the dataset with it
    claim = store.claim_version(_version("run-known"), owner="me", now=NOW, lease_seconds=60)
    assert claim.doc.status == VersionStatus.CLAIMED
    outcome = VersionOutcome(message_id="m1", request={}, reason="", content_key="k", answered=False)
    assert store.finish_version("run-known", owner="me", status=VersionStatus.PUBLISHED, now=NOW, outcome=outcome)
    assert client.transactions == 0
    finished = store.version("run-known")
    assert finished is not None and finished.status == VersionStatus.PUBLISHED and finished.message_id == "m1"
    # Another owner's finish is refused on the stored document, as before.
    assert not store.finish_version("run-known", owner="other", status=VersionStatus.CLAIMED, now=NOW)
    assert client.transactions == 1


def _content(run_id: str) -> ContentRecord:
    return ContentRecord(
        content_key="content:landing/datasets/known/:abc",
        digest="abc",
        dataset_id="ds-known",
        uri="gs://landing/datasets/known/",
        run_id=run_id,
        idempotency_key=f"key-{run_id}",
        generation="17",
        object_count=1,
        total_bytes=10,
    )


def test_a_new_version_and_its_content_are_claimed_in_one_commit(client: Counting) -> None:
    store = DatasetsStore(client, "datasets", "dataset_versions")
    assert store.claim_new(_version("run-new"), _content("run-new"), owner="me", now=NOW, lease_seconds=60)
    claimed = store.version("run-new")
    assert claimed is not None and claimed.status == VersionStatus.CLAIMED and claimed.owner == "me"
    content = store.content("ds-known", "abc")
    assert content is not None and content.run_id == "run-new"
    assert client.transactions == 0
    # The claim is kept: its finish is one conditional Commit.
    assert store.finish_version("run-new", owner="me", status=VersionStatus.PUBLISHED, now=NOW)
    assert client.transactions == 0


@pytest.mark.parametrize("existing", ["version", "content"])
def test_claim_new_writes_nothing_when_either_exists(client: Counting, existing: str) -> None:
    store = DatasetsStore(client, "datasets", "dataset_versions")
    if existing == "version":
        store.claim_version(_version("run-new"), owner="other", now=NOW, lease_seconds=60)
    else:
        store.claim_content(_content("run-earlier"), now=NOW)
    assert not store.claim_new(_version("run-new"), _content("run-new"), owner="me", now=NOW, lease_seconds=60)
    version, content = store.version("run-new"), store.content("ds-known", "abc")
    if existing == "version":
        assert version is not None and version.owner == "other", "the version as it was"
        assert content is None, "no content written beside a refused version"
    else:
        assert version is None, "no version written beside a refused content"
        assert content is not None and content.run_id == "run-earlier"
