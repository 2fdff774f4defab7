"""`landfall watch RUN_ID`: follow a run until it ends, printing each state change and, on the local stack, the
trainer's progress from its log records (trainer/loop.py): the step of the planned total with an ETA, the training
loss of the last `training` record and the held-out loss of the last `epoch finished`, labelled; and, when the last
record is neither (reading the dataset, saving a checkpoint), what the trainer is doing and since when."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from landfall.access import visible_run
from landfall.commands.logs import chief_log
from landfall.commands.runs import run_id_argument
from landfall.errors import CommandError
from landfall.queries.datasets import requested_version
from landfall.queries.runs import is_recorded, read_run
from landfall.words import progress_line
from schemas.record_bounds import HISTORY_HEAD
from schemas.run_record import RunRecord

POLL_S = 1.0
RECORD_WAIT_S = 120.0
"""How long watch waits for the dispatcher to record a run that ingest has requested (`landfall drop` prints the
run id as soon as the request is published)."""


class Watcher:
    """What has been printed so far, so that each poll prints only what is new."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.changes = 0
        self.progress: str | None = None

    def show(self, run: RunRecord, progress: str | None) -> None:
        # `changes` counts every entry the run ever had: a long wait's record keeps its first and last entries
        # only (schemas/record_bounds.py), so an entry's place is its index plus the entries left out before it.
        omitted = run.history_omitted or 0
        for index, change in enumerate(run.history):
            place = index if index < HISTORY_HEAD or not omitted else index + omitted
            if place < self.changes:
                continue
            if place > self.changes:
                self.out.write(f"{'':<27} {'...':<10} {place - self.changes} entries left out of the record\n")
            self.out.write(f"{change.at}  {change.state:<10} {change.detail}\n")
            self.changes = place + 1
        if progress and progress != self.progress and not run.state.terminal:
            shown = (self.progress or "").splitlines()
            for line in progress.splitlines():
                if line not in shown:  # the step line once, while what the trainer does next changes
                    self.out.write(f"{'':<27} {'':<10} {line}\n")
            self.progress = progress
        self.out.flush()


def summary(run: RunRecord) -> str:
    if run.error is not None:
        return f"run {run.run_id} ended {run.state}: {run.error.message} ({run.error.code})"
    metrics = run.metrics or {}
    final = metrics.get("final") or {}
    evaluation = metrics.get("evaluation")
    split = evaluation.get("split") if isinstance(evaluation, dict) else None
    figures = ", ".join(f"{k} {v:.4g}" for k, v in final.items() if isinstance(v, int | float))
    on = f" (on the {split} split)" if split and figures else ""
    return f"run {run.run_id} ended {run.state}" + (f": {figures}{on}" if figures else "")


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
        chief = chief_log(state_dir, run.vertex.job_id)
        if chief is None:
            return None
        return progress_line(chief.read_text(errors="replace").splitlines())

    return read


def wait_until_recorded(
    run_id: str, sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic
) -> None:
    """Returns once the run is recorded. A run no one requested is an error at once; one that ingest requested is
    waited for (the dispatcher records it when the request arrives), up to RECORD_WAIT_S."""
    if is_recorded(run_id):
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
    while not is_recorded(run_id):
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
    run = watch(lambda: visible_run(args.run_id, "watch"), progress, sys.stdout)
    print(summary(run))
    return 0 if run.state == "SUCCEEDED" else 1


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "watch",
        help="follow a run until it ends: state changes and training progress",
        description="Prints each state change of the run as it is recorded and, on the local stack, "
        "the trainer's progress until the run ends: epoch, step of the planned total, ETA, training "
        "and held-out loss (labelled), and what the trainer is doing when it is not stepping; exit 0 when "
        "it SUCCEEDED, 1 otherwise.",
    )
    p.add_argument("run_id", type=run_id_argument, metavar="RUN_ID", help="the run id (see `landfall runs`)")
    p.set_defaults(func=cmd_watch)
