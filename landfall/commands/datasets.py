"""`landfall datasets`, `landfall dataset URI`, `landfall retrain URI` and `landfall sweep`: what ingest knows about
each landing prefix (Firestore, one document per prefix, shaped by schemas/dataset_record.py), a new run of a
dataset on purpose, and an ingest sweep on demand."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

from landfall.errors import CommandError, client_boundary
from landfall.queries.datasets import StoredDataset, dataset_document, list_datasets, read_dataset
from landfall.tables import render_table
from landfall.ticks import fed_by_schedule
from landfall.words import started_run
from schemas.dataset_record import (
    DatasetRecord,
    DatasetStatus,
)
from schemas.errors import SchemaError

REASON_WIDTH = 80
"""Characters of `reason` shown in the `landfall datasets` table; `--json` and `landfall dataset` show all."""
SWEEP_SCHEDULE = "ingest_sweep"
"""The topology schedule whose tick `landfall sweep` publishes."""

NEXT_STEP = {
    DatasetStatus.COLLECTING: "objects are arriving; the sweep closes the dataset once the route's quiet period "
    "has passed (`landfall sweep` runs one now)",
    DatasetStatus.WAITING: "the manifest names objects that are missing or differ (see reason); the dataset "
    "completes when they land",
    DatasetStatus.REFUSED: "fix what the reason says, then land a new _SUCCESS marker or manifest (a new version)",
    DatasetStatus.REQUESTED: "a TrainingRequest was published; `landfall run {run_id}` follows the run",
    DatasetStatus.DUPLICATE: "these objects were trained already as run {duplicate_of} (`landfall run "
    "{duplicate_of}`); `landfall retrain {uri}` trains them again on purpose",
}
"""What a person can do about a dataset in each status (shown by `landfall dataset`)."""

STATUSES = tuple(s.value for s in DatasetStatus)
VERSION_LABELS = (
    ("run_id", "run"),
    ("status", "status"),
    ("duplicate_of", "duplicate of"),
    ("generation", "generation"),
    ("kind", "kind"),
    ("completed_by", "completed by"),
    ("idempotency_key", "key"),
    ("content_key", "content"),
)


class DatasetUriError(ValueError):
    """A dataset URI that is not gs://BUCKET/PREFIX/."""


def parse_dataset_uri(uri: str) -> tuple[str, str]:
    """(bucket, prefix ending in '/') of gs://BUCKET/PREFIX/; the trailing '/' may be left out."""
    bucket, _, prefix = uri.removeprefix("gs://").partition("/")
    if not uri.startswith("gs://") or not bucket or not prefix.strip("/"):
        raise DatasetUriError(
            f"expected a dataset folder gs://BUCKET/PREFIX/ (e.g. gs://landfall-landing/datasets/mydata/), got {uri!r}"
        )
    return bucket, prefix if prefix.endswith("/") else f"{prefix}/"


def short(text: str, width: int = REASON_WIDTH) -> str:
    """text on one line, cut to width characters with '...' when longer."""
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def table_rows(records: list[DatasetRecord]) -> list[list[str]]:
    return [
        [
            r.uri,
            r.route,
            r.status.value,
            started_run(r),
            r.updated_at,
            short(r.reason),
        ]
        for r in records
    ]


def _value(value: Any) -> str:
    return json.dumps(value, default=str) if isinstance(value, dict | list) else str(value)


def describe_dataset(record: DatasetRecord, extra: Mapping[str, Any] | None = None) -> str:
    """A dataset record as a person reads it: where it stands, why, its version, what to do next; then any field
    the schema does not name (`extra`), so nothing in the stored document is hidden."""
    version = {} if record.version is None else record.version.to_dict()
    if not started_run(record):
        version.pop("run_id", None)  # no request was published, so no run of that id exists
    lines = [
        f"dataset   {record.uri}",
        f"id        {record.dataset_id}",
        f"route     {record.route or '-'}",
        f"status    {record.status.value}",
        f"updated   {record.updated_at}",
    ]
    reason = record.reason.splitlines()
    if reason:
        lines += [f"reason    {reason[0]}", *(f"          {line}" for line in reason[1:])]
    if version:
        labelled = dict(VERSION_LABELS)
        keys = [key for key, _ in VERSION_LABELS if key in version] + sorted(set(version) - set(labelled))
        lines += [
            f"{'version' if i == 0 else '':<10}{labelled.get(key, key):<13}{_value(version[key])}"
            for i, key in enumerate(keys)
        ]
    else:
        lines.append("version   none yet")
    step = NEXT_STEP[record.status].format(
        run_id=(record.version and record.version.run_id) or "RUN_ID",
        duplicate_of=(record.version and record.version.duplicate_of) or "RUN_ID",
        uri=record.uri or "URI",
    )
    lines.append(f"next      {step}")
    extra = extra or {}
    lines += [f"{key:<9} {_value(extra[key])}" for key in sorted(extra)]
    return "\n".join(lines)


def cmd_datasets(args: argparse.Namespace) -> int:
    try:
        docs = list_datasets(args.status, args.limit)
    except CommandError as exc:
        print(f"landfall datasets: {exc}", file=sys.stderr)
        return 1
    stored: list[StoredDataset] = []
    unreadable = 0
    for doc in docs:
        try:
            stored.append(read_dataset(doc))
        except SchemaError as exc:
            unreadable += 1
            print(
                f"landfall datasets: left out document {doc.get('dataset_id') or doc.get('uri') or '?'}: it does "
                f"not fit schemas/dataset_record.py ({exc}); a newer or older Landfall wrote it",
                file=sys.stderr,
            )
    if args.json:
        print(json.dumps([d.to_dict() for d in stored], indent=2, default=str))
    elif not stored and not unreadable:
        print(f"no datasets with status {args.status}" if args.status else "no datasets yet")
    elif stored:
        rows = table_rows([d.record for d in stored])
        print(render_table(["DATASET", "ROUTE", "STATUS", "RUN", "UPDATED", "REASON"], rows))
    return 1 if unreadable else 0


def cmd_dataset(args: argparse.Namespace) -> int:
    try:
        bucket, prefix = parse_dataset_uri(args.uri)
    except DatasetUriError as exc:
        print(f"landfall dataset: {exc}", file=sys.stderr)
        return 2
    try:
        found = dataset_document(bucket, prefix)
    except CommandError as exc:
        print(f"landfall dataset: {exc}", file=sys.stderr)
        return 1
    dataset_id, described = found.dataset_id, found.described
    if found.doc is None:
        print(
            f"landfall dataset: no record of gs://{bucket}/{prefix} (document {dataset_id} in the {described}). "
            "Check that the URI is the dataset folder itself (the one holding the data and _SUCCESS), that an "
            "object has landed under it, and that you are on the intended stack or project; `landfall datasets` "
            "lists the known ones.",
            file=sys.stderr,
        )
        return 1
    try:
        stored = read_dataset(found.doc)
    except SchemaError as exc:
        print(
            f"landfall dataset: the record of gs://{bucket}/{prefix} (document {dataset_id} in the {described}) "
            f"does not fit schemas/dataset_record.py: {exc}. A newer or older Landfall wrote it; read it in the "
            "Firestore console, or land a new _SUCCESS marker so ingest writes it again",
            file=sys.stderr,
        )
        return 1
    print(
        json.dumps(stored.to_dict(), indent=2, default=str)
        if args.json
        else describe_dataset(stored.record, stored.extra)
    )
    return 0


def _ingest_deps() -> Any:
    """Ingest's own dependencies (Cloud Storage, Firestore, the requests topic), as the function builds them."""
    from functions.wiring import ingest_deps

    return ingest_deps()


def cmd_retrain(args: argparse.Namespace) -> int:
    from functions.errors import LandfallError
    from functions.operations import retrain

    try:
        bucket, prefix = parse_dataset_uri(args.uri)
    except DatasetUriError as exc:
        print(f"landfall retrain: {exc}", file=sys.stderr)
        return 2
    try:
        with client_boundary(f"retrain gs://{bucket}/{prefix}"):
            deps = _ingest_deps()
            done = retrain(bucket, prefix, deps)
            version = deps.datasets.version(done.run_id)
    except (
        CommandError,
        LandfallError,
        SchemaError,
    ) as exc:  # RetrainError, Firestore/GCS unavailable, a drifted record
        print(f"landfall retrain: {exc}", file=sys.stderr)
        return 1
    if not done.outcome.startswith("published:"):
        why = (version.reason if version is not None else "") or done.outcome
        print(f"landfall retrain: no request was made: {why}", file=sys.stderr)
        return 1
    print(
        f"retrain {done.count} of gs://{bucket}/{prefix}: requested run {done.run_id} (key {done.idempotency_key})"
        f"; `landfall run {done.run_id}` follows it"
    )
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from landfall.ticks import publish_schedule_tick

    print(publish_schedule_tick(SWEEP_SCHEDULE)[0])
    return 0


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "datasets",
        help="list the datasets ingest has seen, most recently updated first",
        description="One row per dataset folder in the landing bucket: its route, status "
        f"({', '.join(STATUSES)}), the run it started and, when no request was made, "
        f"why (cut to {REASON_WIDTH} characters; --json and `landfall dataset URI` show "
        "it whole).",
    )
    p.add_argument("--status", type=str.upper, choices=STATUSES, help="only datasets in this status")
    p.add_argument("--limit", type=_positive, default=50, metavar="N", help="show at most N datasets (default 50)")
    p.add_argument("--json", action="store_true", help="print the dataset records as JSON")
    p.set_defaults(func=cmd_datasets)

    p = sub.add_parser(
        "dataset",
        help="show one dataset's record: status, full reason, version, next step",
        description="The record ingest keeps for one dataset folder, found by its gs:// URI. Exit "
        "status 1 when there is none.",
    )
    p.add_argument("uri", metavar="URI", help="the dataset folder, gs://BUCKET/PREFIX/ (see `landfall datasets`)")
    p.add_argument("--json", action="store_true", help="print the record as JSON")
    p.set_defaults(func=cmd_dataset)

    p = sub.add_parser(
        "retrain",
        help="train a dataset again on purpose: a new run of the same objects",
        description="Ingest trains the same objects once: a dataset marked complete again with the "
        "same names, sizes and checksums is recorded as a DUPLICATE of the earlier run. "
        "retrain evaluates the folder as it is now (route rules, landfall.json) and "
        "publishes a TrainingRequest under a new key (the content's key and a retrain "
        "count), recorded on the dataset. Prints the run id; exit status 1 when no "
        "request was made, with the reason.",
    )
    p.add_argument("uri", metavar="URI", help="the dataset folder, gs://BUCKET/PREFIX/ (see `landfall datasets`)")
    p.set_defaults(func=cmd_retrain)

    p = sub.add_parser(
        "sweep",
        help="run the ingest sweep now: publish one tick to its topic",
        description=f"Publish one tick of the {SWEEP_SCHEDULE} schedule, as `gcloud scheduler jobs run` "
        f"would: the {fed_by_schedule(SWEEP_SCHEDULE)} function closes quiet-period datasets and re-checks "
        "manifests. Prints the message id.",
    )
    p.set_defaults(func=cmd_sweep)
