"""`landfall reconcile` (one reconciler pass now) and `landfall cancel RUN_ID`: operating on runs."""

from __future__ import annotations

import argparse
import getpass
from datetime import UTC, datetime

from landfall.commands.drop import seconds_argument
from landfall.commands.runs import run_id_argument
from landfall.errors import CommandError, client_boundary
from landfall.ticks import fed_by_schedule

RECONCILE_SCHEDULE = "reconcile"
"""The topology schedule whose tick `landfall reconcile` publishes."""


def cmd_reconcile(args: argparse.Namespace) -> int:
    from landfall.ticks import pass_log, publish_schedule_tick, tick_outcome

    function = fed_by_schedule(RECONCILE_SCHEDULE)
    log = pass_log(function)
    start = log.stat().st_size if log is not None and log.exists() else 0  # the answer is logged after this
    said, message_id = publish_schedule_tick(RECONCILE_SCHEDULE)
    if log is None or args.no_wait:
        print(said)
        if log is None:
            print(
                f"the pass's summary is {function}'s log line `{function}: SUMMARY (message {message_id})` "
                f"(in Google Cloud: `gcloud functions logs read` for {function}, or Cloud Logging)"
            )
        return 0
    outcome = tick_outcome(log, function, message_id, args.wait, start=start)
    if outcome is None:
        raise CommandError(
            f"{said}, but {function} logged no answer to it within {args.wait:g}s; see {log}, and "
            "`landfall status` for whether the stack's functions are up"
        )
    print(f"reconcile pass (message {message_id}): {outcome}")
    return 1 if outcome.startswith(("failed:", "will be retried:")) else 0


def cancel(run_id: str, *, by: str) -> str:
    """Cancel a run (`landfall cancel`'s description) as `by` asks; what happened, in a sentence. `landfall cancel`
    and the dashboard's cancel action both call this."""
    from functions.errors import LandfallError
    from functions.operations import cancel_run
    from functions.wiring import runs_store, vertex_jobs

    with client_boundary("cancel the run"):
        try:
            return cancel_run(run_id, by=by, store=runs_store(), vertex=vertex_jobs(), now=datetime.now(UTC))
        except LandfallError as exc:
            raise CommandError(str(exc)) from exc


def cmd_cancel(args: argparse.Namespace) -> int:
    from landfall.access import check_visible_doc, cli_viewer

    viewer = cli_viewer()
    if viewer is not None:  # a team's run only by its members (and operators)
        from landfall.queries.runs import read_run_document

        check_visible_doc(args.run_id, read_run_document(args.run_id), viewer)
    said = cancel(args.run_id, by=args.by)
    print(said)
    return 1 if said.startswith("no run ") else 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "reconcile",
        help="run the reconciler now: publish one tick to its topic",
        description=f"Publish one tick of the {RECONCILE_SCHEDULE} schedule, as `gcloud scheduler jobs run` "
        f"would: {fed_by_schedule(RECONCILE_SCHEDULE)} records ended jobs, takes over stuck submissions and "
        "resubmits runs waiting for capacity. On the local stack it waits for that pass and prints its "
        "summary (e.g. `long-wait=1 orphan=1 unchanged=4`); in Google Cloud it prints the message id and "
        "where the summary is logged.",
    )
    p.add_argument(
        "--wait",
        type=seconds_argument,
        default=120.0,
        metavar="SECONDS",
        help="how long to wait for the pass's summary on the local stack (default 120)",
    )
    p.add_argument("--no-wait", action="store_true", help="publish the tick and print its message id only")
    p.set_defaults(func=cmd_reconcile)
    p = sub.add_parser(
        "cancel",
        help="cancel a run: its Vertex job, or the run itself before submission",
        description="Ask Vertex to cancel the run's job (CancelCustomJob); the run ends CANCELLED "
        "with who asked and when. A run with no job yet is stopped before submission; "
        "an ended run is left as it is.",
    )
    p.add_argument("run_id", type=run_id_argument, metavar="RUN_ID", help="the run (see `landfall runs`)")
    p.add_argument("--by", default=getpass.getuser(), help="who asks (default: your user name)")
    p.set_defaults(func=cmd_cancel)


__all__ = ["cancel", "cmd_cancel", "cmd_reconcile", "register"]
