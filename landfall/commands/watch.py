"""`landfall watch RUN_ID`: follow a run until it ends, printing each state change and, on the local stack, the
trainer's progress (its last `training` / `epoch finished` log record: epoch, step of total, loss)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TextIO

from landfall.commands.logs import replica_logs
from landfall.commands.runs import read_run, read_run_document
from landfall.errors import CommandError, client_boundary
from schemas.dataset_version import DatasetVersion, parse_dataset_version
from schemas.errors import SchemaError
from schemas.run_record import RunRecord

POLL_S = 1.0
RECORD_WAIT_S = 120.0
"""How long watch waits for the dispatcher to record a run that ingest has requested (`landfall drop` prints the
run id as soon as the request is published)."""
PROGRESS_MESSAGES = frozenset({"training", "epoch finished"})
"""The trainer's log records (trainer/loop.py) that say how far it got."""


def progress_line(lines: Iterable[str]) -> str | None:
    """The last progress record among a replica's log lines as `epoch E  step S/T  loss L`, or None."""
    last: dict[str, Any] | None = None
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("message") in PROGRESS_MESSAGES:
            last = record
    if last is None:
        return None
    parts = [
        f"epoch {last['epoch']}" if "epoch" in last else "",
        f"step {last.get('step')}" + (f"/{last['total_steps']}" if last.get("total_steps") else ""),
        f"loss {last['loss']:.4g}" if isinstance(last.get("loss"), int | float) else "",
    ]
    return "  ".join(p for p in parts if p)


class Watcher:
    """What has been printed so far, so that each poll prints only what is new."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.changes = 0
        self.progress: str | None = None

    def show(self, run: RunRecord, progress: str | None) -> None:
        for change in run.history[self.changes :]:
            self.out.write(f"{change.at}  {change.state:<10} {change.detail}\n")
        self.changes = len(run.history)
        if progress and progress != self.progress and not run.state.terminal:
            self.out.write(f"{'':<27} {'':<10} {progress}\n")
            self.progress = progress
        self.out.flush()


def summary(run: RunRecord) -> str:
    if run.error is not None:
        return f"run {run.run_id} ended {run.state}: {run.error.message} ({run.error.code})"
    final = (run.metrics or {}).get("final") or {}
    figures = ", ".join(f"{k} {v:.4g}" for k, v in final.items() if isinstance(v, int | float))
    return f"run {run.run_id} ended {run.state}" + (f": {figures}" if figures else "")


def watch(
    read: Callable[[], RunRecord],
    progress: Callable[[RunRecord], str | None],
    out: TextIO,
    sleep: Callable[[float], None] = time.sleep,
) -> RunRecord:
    """Print the run's state changes and progress as they happen; returns the record once it is terminal."""
    watcher = Watcher(out)
    while True:
        run = read()
        watcher.show(run, progress(run))
        if run.state.terminal:
            return run
        sleep(POLL_S)


def local_progress(state_dir: Path) -> Callable[[RunRecord], str | None]:
    """Progress from the chief replica's log file that the Vertex emulator keeps (the local stack only)."""

    def read(run: RunRecord) -> str | None:
        if run.vertex is None:
            return None
        paths = replica_logs(state_dir, run.vertex.job_id)
        chief = paths.get("workerpool0-0") or next(iter(paths.values()), None)
        if chief is None:
            return None
        return progress_line(chief.read_text(errors="replace").splitlines())

    return read


def requested_version(run_id: str) -> DatasetVersion | None:
    """The dataset version whose request names this run (collection dataset_versions is keyed by run id), if any."""
    from functions.gcp.clients import firestore_client
    from functions.settings import get_settings

    with client_boundary(f"read the dataset version of run {run_id!r}"):
        ref = firestore_client().collection(get_settings().dataset_versions_collection).document(run_id)
        snapshot = ref.get(timeout=20.0)
    if not snapshot.exists:
        return None
    try:
        return parse_dataset_version(snapshot.to_dict())
    except SchemaError as exc:
        raise CommandError(
            f"the dataset version of run {run_id} does not fit schemas/dataset_version.py: {exc}; a newer or "
            "older Landfall wrote it"
        ) from exc


def wait_until_recorded(
    run_id: str, sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic
) -> None:
    """Returns once the run is recorded. A run no one requested is an error at once; one that ingest requested is
    waited for (the dispatcher records it when the request arrives), up to RECORD_WAIT_S."""
    if read_run_document(run_id) is not None:
        return
    version = requested_version(run_id)
    if version is None:
        read_run(run_id, "watch")  # raises the one "no run" error (or, recorded meanwhile, returns it)
        return
    print(
        f"run {run_id} was requested for {version.uri}; waiting for the dispatcher to record it",
        file=sys.stderr,
    )
    deadline = clock() + RECORD_WAIT_S
    while read_run_document(run_id) is None:
        if clock() >= deadline:
            raise CommandError(
                f"run {run_id} was requested but the dispatcher has not recorded it within "
                f"{RECORD_WAIT_S:g}s; `landfall status` says whether the stack's functions are up, "
                f"`landfall dataset {version.uri}` where its dataset stands"
            )
        sleep(POLL_S)


def cmd_watch(args: argparse.Namespace) -> int:
    from deploy.local.provision import default_state_dir

    wait_until_recorded(args.run_id)  # a missing or unreadable run is one line before anything is printed
    if os.environ.get("LANDFALL_VERTEX_ENDPOINT"):
        progress = local_progress(default_state_dir())
    else:
        print(
            f"state changes only: the trainer's progress is in Cloud Logging (`landfall logs {args.run_id}`)",
            file=sys.stderr,
        )
        progress = lambda _run: None  # noqa: E731
    run = watch(lambda: read_run(args.run_id, "watch"), progress, sys.stdout)
    print(summary(run))
    return 0 if run.state == "SUCCEEDED" else 1


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "watch",
        help="follow a run until it ends: state changes and training progress",
        description="Prints each state change of the run as it is recorded and, on the local stack, "
        "the trainer's progress (epoch, step, loss) until the run ends; exit 0 when it "
        "SUCCEEDED, 1 otherwise.",
    )
    p.add_argument("run_id", metavar="RUN_ID", help="the run id (see `landfall runs`)")
    p.set_defaults(func=cmd_watch)
