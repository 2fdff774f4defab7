"""`landfall logs RUN_ID [--follow] [--json]`: what the run's replicas printed.

On the local stack the Vertex emulator keeps one file per replica under <state dir>/vertex/jobs/<job id>/
(deploy/vertex_emulator/logs.py). Each line is printed as text, `TIME  REPLICA  MESSAGE  key=value ...`
(landfall/trainer_log.py); --json prints the records as the replicas wrote them, prefixed [replica] when there are
several. --follow is `tail -f`: it waits for the job and its logs, prints lines as they are written, and stops when
the run ends. For a job in Google Cloud the replicas' output is in Cloud Logging: the command prints the filter and
the gcloud command that reads it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO

from landfall.access import visible_run
from landfall.commands.runs import run_id_argument
from landfall.errors import CommandError
from landfall.queries.runs import read_run
from landfall.trainer_log import text_line
from schemas.run_record import RunRecord

VERTEX_STATE = "vertex"
"""Where `landfall up` points the Vertex emulator's --state-dir, under the stack's state folder."""
FOLLOW_POLL_S = 1.0


def cloud_logging_filter(job_id: str) -> str:
    return f'resource.type="ml_job" AND resource.labels.job_id="{job_id}"'


def cloud_logging_commands(run: RunRecord) -> str:
    """How to read a Google Cloud job's replica logs: the Cloud Logging filter and the gcloud commands."""
    assert run.vertex is not None
    project = run.vertex.job_name.split("/")[1] if run.vertex.job_name.startswith("projects/") else ""
    where = f" --project={project}" if project else ""
    query = cloud_logging_filter(run.vertex.job_id)
    return "\n".join(
        [
            f"run {run.run_id} ran as Vertex job {run.vertex.job_name}; its replicas log to Cloud Logging.",
            f"filter:  {query}",
            f"read:    gcloud logging read '{query}'{where} --order=asc --format='value(timestamp,severity,"
            "jsonPayload.message,textPayload)'",
            f"follow:  gcloud beta logging tail '{query}'{where}",
        ]
    )


def chief_log(state_dir: Path, job_id: str) -> Path | None:
    """The chief replica's log file of the job (workerpool0-0, else the first replica's), or None before one is
    written: what `landfall watch` and the dashboard read the trainer's progress from."""
    paths = replica_logs(state_dir, job_id)
    return paths.get("workerpool0-0") or next(iter(paths.values()), None)


def replica_logs(state_dir: Path, job_id: str) -> dict[str, Path]:
    from deploy.vertex_emulator.logs import replica_log_paths

    return replica_log_paths(state_dir / VERTEX_STATE, job_id)


class LogPrinter:
    """Prints what each replica log gained since the last call: whole lines only until the end (final=True). As
    text (text_line) unless raw, where lines are printed as written, prefixed [replica] when there are several."""

    def __init__(self, out: TextIO, *, raw: bool = False) -> None:
        self.out = out
        self.raw = raw
        self.offsets: dict[str, int] = {}

    def print_new(self, paths: Mapping[str, Path], *, final: bool = False) -> None:
        prefixed = len(paths) > 1
        for replica, path in paths.items():
            with path.open("rb") as fh:
                fh.seek(self.offsets.get(replica, 0))
                data = fh.read()
            complete = data if final else data[: data.rfind(b"\n") + 1]
            self.offsets[replica] = self.offsets.get(replica, 0) + len(complete)
            for line in complete.decode("utf-8", errors="replace").splitlines():
                if not self.raw:
                    self.out.write(text_line(replica, line) + "\n")
                else:
                    self.out.write(f"[{replica}] {line}\n" if prefixed else f"{line}\n")
        self.out.flush()


def follow(
    paths: Callable[[], Mapping[str, Path]],
    ended: Callable[[], bool],
    out: TextIO,
    sleep: Callable[[float], None] = time.sleep,
    *,
    raw: bool = False,
) -> None:
    """Print the logs as they grow until the run has ended, then what was left."""
    printer = LogPrinter(out, raw=raw)
    while True:
        done = ended()  # asked before reading, so that the lines written before the end are printed
        printer.print_new(paths(), final=done)
        if done:
            return
        sleep(FOLLOW_POLL_S)


def wait_for_job(run_id: str, sleep: Callable[[float], None] = time.sleep) -> RunRecord:
    """The run once it has a Vertex job, or once it ended without one (--follow waits, as `tail -f` does)."""
    run = visible_run(run_id, "run")
    if run.vertex is None and not run.state.terminal:
        print(f"run {run_id} is {run.state}; waiting for its Vertex job", file=sys.stderr)
    while run.vertex is None and not run.state.terminal:
        sleep(FOLLOW_POLL_S)
        run = read_run(run_id, "run")
    return run


def cmd_logs(args: argparse.Namespace) -> int:
    from deploy.local.provision import default_state_dir

    run = wait_for_job(args.run_id) if args.follow else visible_run(args.run_id, "run")
    if run.vertex is None:
        raise CommandError(
            f"run {run.run_id} is {run.state} and started no Vertex job, so no replica ever ran; "
            f"`landfall run {run.run_id}` says why"
        )
    if not os.environ.get("LANDFALL_VERTEX_ENDPOINT"):
        print(cloud_logging_commands(run))
        return 0
    state_dir = default_state_dir()
    job_id = run.vertex.job_id
    if args.follow:
        follow(lambda: replica_logs(state_dir, job_id), lambda: _ended(run.run_id), sys.stdout, raw=args.json)
        return 0
    paths = replica_logs(state_dir, job_id)
    if not paths:
        raise CommandError(
            f"no replica logs for job {job_id} under {state_dir / VERTEX_STATE}/jobs/ yet (run "
            f"{run.run_id} is {run.state}); `landfall logs {run.run_id} --follow` waits for them"
        )
    LogPrinter(sys.stdout, raw=args.json).print_new(paths, final=True)
    return 0


def _ended(run_id: str) -> bool:
    return read_run(run_id, "run").state.terminal


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "logs",
        help="print what a run's replicas logged (the trainer's output)",
        description="On the local stack: the Vertex emulator's replica log files, one line per "
        "record as text (time, replica, message, its fields); --json prints the records as written. "
        "For a job in Google Cloud: the Cloud Logging filter and the gcloud command that reads it.",
    )
    p.add_argument("run_id", type=run_id_argument, metavar="RUN_ID", help="the run id (see `landfall runs`)")
    p.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="as tail -f: wait for the job, keep printing as the replicas write, stop when the run ends",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the replicas' JSON records as written ([replica] before each line when several)",
    )
    p.set_defaults(func=cmd_logs)
