"""`landfall reconcile` (one reconciler pass now) and `landfall cancel RUN_ID`: operating on runs."""

from __future__ import annotations

import argparse
import getpass
from datetime import UTC, datetime

from landfall.errors import CommandError, client_boundary
from landfall.ticks import fed_by_schedule

RECONCILE_SCHEDULE = "reconcile"
"""The topology schedule whose tick `landfall reconcile` publishes."""


def cmd_reconcile(args: argparse.Namespace) -> int:
    from landfall.ticks import publish_schedule_tick

    print(publish_schedule_tick(RECONCILE_SCHEDULE))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from functions.errors import LandfallError
    from functions.reconciler.cancel import cancel_run
    from functions.wiring import runs_store, vertex_jobs

    with client_boundary("cancel the run"):
        try:
            said = cancel_run(args.run_id, by=args.by, store=runs_store(), vertex=vertex_jobs(), now=datetime.now(UTC))
        except LandfallError as exc:
            raise CommandError(str(exc)) from exc
    print(said)
    return 1 if said.startswith("no run ") else 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "reconcile",
        help="run the reconciler now: publish one tick to its topic",
        description=f"Publish one tick of the {RECONCILE_SCHEDULE} schedule, as `gcloud scheduler jobs run` "
        f"would: {fed_by_schedule(RECONCILE_SCHEDULE)} records ended jobs, takes over stuck submissions and "
        "resubmits runs waiting for capacity. Prints the message id.",
    )
    p.set_defaults(func=cmd_reconcile)
    p = sub.add_parser(
        "cancel",
        help="cancel a run: its Vertex job, or the run itself before submission",
        description="Ask Vertex to cancel the run's job (CancelCustomJob); the run ends CANCELLED "
        "with who asked and when. A run with no job yet is stopped before submission; "
        "an ended run is left as it is.",
    )
    p.add_argument("run_id", metavar="RUN_ID", help="the run (see `landfall runs`)")
    p.add_argument("--by", default=getpass.getuser(), help="who asks (default: your user name)")
    p.set_defaults(func=cmd_cancel)


__all__ = ["cmd_cancel", "cmd_reconcile", "register"]
