"""The run records as the CLI and the dashboard read them (Firestore's runs collection, one document per run, shaped
by schemas/run_record.py): one run, and the newest runs under the filters `landfall runs` and the runs page share."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from landfall.errors import CommandError, client_boundary
from schemas.errors import SchemaError
from schemas.run_record import RunRecord, parse_run_record

if TYPE_CHECKING:
    from google.cloud.firestore import CollectionReference, Query

CALL_TIMEOUT_S = 20.0
"""Deadline of one Firestore call, so that an unreachable Google Cloud fails in seconds rather than retrying for
minutes (the local stack is checked before any call: landfall/reach.py)."""
MAX_ID_BYTES = 1500
"""Firestore's limit on a document id (https://firebase.google.com/docs/firestore/quotas#collections_documents_and_fields)."""
TEAM_FIELD = "team.name"
"""Where a run names the team it counts against (run record `team`, docs/teams.md); the dashboard filters on it."""


def runs_collection() -> CollectionReference:
    from google.cloud import firestore

    from functions.settings import get_settings

    with client_boundary("open Firestore"):
        settings = get_settings()
        return firestore.Client(project=settings.project).collection(settings.runs_collection)


def read_run_document(run_id: str) -> dict[str, Any] | None:
    """The stored run document, or None when there is no run of that id."""
    ref = runs_collection().document(run_id)
    with client_boundary(f"read run {run_id!r} from Firestore"):
        snapshot = ref.get(timeout=CALL_TIMEOUT_S)
    return snapshot.to_dict() if snapshot.exists else None


def read_run_documents(run_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The stored documents of these runs by id, in one batched read (Firestore's get_all); a run with no document,
    or an id that cannot name one (empty, with a '/', past MAX_ID_BYTES), is left out."""
    from google.cloud import firestore

    from functions.settings import get_settings

    ids = [i for i in dict.fromkeys(run_ids) if i and "/" not in i and len(i.encode()) <= MAX_ID_BYTES]
    if not ids:
        return {}
    with client_boundary("read runs from Firestore"):
        settings = get_settings()
        client = firestore.Client(project=settings.project)
        collection = client.collection(settings.runs_collection)
        snapshots = client.get_all([collection.document(i) for i in ids], timeout=CALL_TIMEOUT_S)
        return {s.id: doc for s in snapshots if s.exists and (doc := s.to_dict()) is not None}


def run_reader(run_id: str) -> Callable[[], dict[str, Any] | None]:
    """A reader of one run's document, asked again while a command polls it (`landfall demo`): one client for all
    its reads; None while the run is not recorded."""
    ref = runs_collection().document(run_id)

    def read() -> dict[str, Any] | None:
        snapshot = ref.get()
        return snapshot.to_dict() if snapshot.exists else None

    return read


def run_document(run_id: str) -> dict[str, Any]:
    """The stored run document (what `landfall run --json` prints), or a CommandError saying there is none."""
    doc = read_run_document(run_id)
    if doc is None:
        raise CommandError(f"no run {run_id!r}; `landfall runs` lists them")
    return doc


def is_recorded(run_id: str) -> bool:
    """Whether the dispatcher has recorded the run (its document exists, whether or not it fits the schema)."""
    return read_run_document(run_id) is not None


def read_run(run_id: str, command: str) -> RunRecord:
    """The run record, or a CommandError saying there is none or that it does not fit the schema (`command` is the
    one whose `--json` shows the document as stored)."""
    from landfall.words import reconcile_note_of

    doc = read_run_document(run_id)
    if doc is None:
        raise CommandError(f"no run {run_id!r}; `landfall runs` lists them")
    try:
        return parse_run_record(doc)
    except SchemaError as exc:
        raise CommandError(
            f"run {run_id!r} does not fit the run record schema: {exc}{reconcile_note_of(doc)}; `landfall {command} "
            f"{run_id} --json` shows it as stored"
        ) from exc


def run_filters(
    state: str | None, dataset: str | None, since: datetime | None, team: str | None = None
) -> list[tuple[str, str, Any]]:
    """The Firestore filters of `landfall runs` (and the dashboard's runs page) as (field, operator, value),
    equalities first; the query orders by created_at descending. Each combination needs a composite index of
    deploy/firestore.indexes.json (a unit test checks that it is listed); the emulator needs none."""
    filters = [
        ("state", "==", state),
        ("request.dataset.uri", "==", dataset),
        (TEAM_FIELD, "==", team),
        ("created_at", ">=", since),
    ]
    return [(name, op, value) for name, op, value in filters if value]


def recent_runs(
    state: str | None,
    limit: int,
    dataset: str | None = None,
    since: datetime | None = None,
    *,
    team: str | None = None,
    after: str | None = None,
) -> list[dict[str, Any]]:
    """The newest `limit` run documents matching the filters (run_filters) as stored (what `--json` prints), newest
    first; `after` (a run id, the last of the previous page) pages on from that run with a Firestore cursor, so a
    page costs its own documents only. parse_runs reads them through the schema."""
    from google.cloud import firestore
    from google.cloud.firestore_v1.base_query import FieldFilter

    collection = runs_collection()
    query: CollectionReference | Query = collection
    with client_boundary("read runs from Firestore"):
        for name, op, value in run_filters(state, dataset, since, team):
            query = query.where(filter=FieldFilter(name, op, value))
        query = query.order_by("created_at", direction=firestore.Query.DESCENDING)
        if after:
            cursor = collection.document(after).get(timeout=CALL_TIMEOUT_S)
            if not cursor.exists:
                raise CommandError(f"no run {after!r} to page on from; start again from the first page")
            query = query.start_after(cursor)
        # a query yields only documents that exist: to_dict() is None only for a missing one
        return [doc for d in query.limit(limit).stream(timeout=CALL_TIMEOUT_S) if (doc := d.to_dict()) is not None]


@dataclass(frozen=True)
class Unreadable:
    """A stored document that does not fit its schema: its id (or '?'), why, and the mark a reconcile pass left on
    it ("" when none reads). Listed by the CLI and the dashboard, never hidden."""

    key: object
    problem: SchemaError
    note: str = ""


@dataclass(frozen=True)
class ReadRuns:
    """Run documents read through the schema: the runs that fit, in their order, and those that do not."""

    runs: tuple[RunRecord, ...]
    unreadable: tuple[Unreadable, ...]


def parse_runs(docs: Iterable[dict[str, Any]]) -> ReadRuns:
    """Each document through schemas/run_record.py."""
    from landfall.words import reconcile_note_of

    runs: list[RunRecord] = []
    unreadable: list[Unreadable] = []
    for doc in docs:
        try:
            runs.append(parse_run_record(doc))
        except SchemaError as exc:
            unreadable.append(Unreadable(doc.get("run_id", "?"), exc, reconcile_note_of(doc)))
    return ReadRuns(tuple(runs), tuple(unreadable))
