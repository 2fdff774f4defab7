"""`landfall retry RUN_ID`: send a FAILED or CANCELLED run's request again, as a new run that names the old one.

A job-level failure is final for its run, and the same request cannot start another one (its key names the ended
run). The retry's key is derived from the old key (`KEY~retry-1`, then `~retry-2` for a retry of the retry), so the
new run id is known before anything is published; the old run is claimed in a Firestore transaction (`retried_by`
is set once), so two `landfall retry` calls at once make one run and the second says which.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from landfall.access import check_visible, cli_viewer
from landfall.commands.runs import run_id_argument
from landfall.errors import CommandError, client_boundary
from landfall.queries.runs import read_run


def cmd_retry(args: argparse.Namespace) -> int:
    viewer = cli_viewer()
    if viewer is not None:  # a team's run only by its members (the dashboard checks its own caller)
        check_visible(read_run(args.run_id, "retry"), viewer)
    result, said = retry_run(args.run_id, from_scratch=args.from_scratch)
    print(json.dumps(result, indent=2) if args.json else said)
    return 0


def retry_run(run_id: str, *, from_scratch: bool = False) -> tuple[dict[str, Any], str]:
    """Retry an ended run (the module's docstring): (the result as `--json` prints it, the sentence that says what
    happened). `landfall retry` and the dashboard's retry action both call this. The retry goes on from the newest
    checkpoint of the run's line (the first run's checkpoint folder, which every retry writes to), or, from_scratch,
    starts at step 0 in its own folder."""
    from functions.errors import LandfallError
    from functions.operations import RetryClaim, claim_retry, not_retryable_reason, retry_request
    from functions.wiring import runs_store
    from landfall.commands.submit import publish
    from schemas.errors import SchemaError

    old = read_run(run_id, "retry")
    why_not = not_retryable_reason(old)
    if why_not:
        raise CommandError(why_not)
    try:
        request = retry_request(old, datetime.now(UTC), from_scratch=from_scratch)
    except SchemaError as exc:
        raise CommandError(
            f"run {old.run_id}'s stored request does not read as a TrainingRequest ({exc}); fix it "
            "and `landfall submit` it as a new request"
        ) from exc
    store = runs_store()
    with client_boundary(f"claim run {old.run_id} for a retry"):
        try:
            claim, current = store.apply(old.run_id, claim_retry(request.run_id, now=datetime.now(UTC)))
            retried_by = current.retried_by if current else None
            retry_run = store.get(retried_by) if claim == RetryClaim.ALREADY and retried_by else None
        except LandfallError as exc:
            raise CommandError(str(exc)) from exc
    if claim == RetryClaim.MISSING or current is None:
        raise CommandError(f"no run {old.run_id!r}; `landfall runs` lists them")
    if claim == RetryClaim.NOT_RETRYABLE:
        raise CommandError(not_retryable_reason(current) or f"run {old.run_id} cannot be retried")
    ours = retried_by == request.run_id
    message_id = None
    if claim == RetryClaim.CLAIMED or (ours and retry_run is None):
        # Claimed here, or claimed by a call whose run is not recorded yet (still in flight, or its publish failed):
        # publishing the same key again is one run either way.
        message_id = publish(request.to_json())
    result: dict[str, Any] = {
        "run_id": retried_by,
        "retry_of": old.run_id,
        "idempotency_key": request.idempotency_key if ours else None,
        "message_id": message_id,
        "already_retried": claim == RetryClaim.ALREADY,
        "checkpoint_lineage": (request.checkpoint_lineage or None) if ours else None,
        "state": None if retry_run is None else str(retry_run.state),
    }
    if claim == RetryClaim.CLAIMED:
        resumes = (
            f"going on from the newest checkpoint in run {request.checkpoint_lineage}'s folder, if it has one"
            if request.checkpoint_lineage
            else "starting at step 0"
        )
        said = (
            f"retrying run {old.run_id} ({old.state}) as run {request.run_id} (key {request.idempotency_key}, "
            f"message {message_id}), {resumes}: `landfall watch {request.run_id}` follows it"
        )
    elif retry_run is not None:
        said = (
            f"run {old.run_id} is already retried by run {retry_run.run_id} ({retry_run.state}); "
            f"`landfall retry {retry_run.run_id}` retries that one once it has ended"
        )
    else:
        said = f"run {old.run_id} is already retried by run {retried_by}, not recorded yet" + (
            f"; its request was published again (message {message_id})" if message_id else ""
        )
    return result, said


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "retry",
        help="start a new run for a FAILED or CANCELLED run's request",
        description="Publishes the run's request again with a key derived from its own "
        "(KEY~retry-N), so it becomes a new run; the old run records `retried_by`, the new "
        "one `retry_of`. The retry goes on from the newest checkpoint of the run's line "
        "(--from-scratch: from step 0). A run is retried once: a second call names the run that "
        "retries it. Prints the new run id.",
    )
    p.add_argument(
        "run_id",
        type=run_id_argument,
        metavar="RUN_ID",
        help="a FAILED or CANCELLED run (see `landfall runs --state FAILED`)",
    )
    p.add_argument(
        "--from-scratch",
        action="store_true",
        help="start at step 0 in the retry's own checkpoint folder; without it the retry goes on from the newest "
        "checkpoint its run's line wrote (the run's, or an earlier retry's)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print run_id, retry_of, idempotency_key, message_id, already_retried, checkpoint_lineage and state as "
        "JSON",
    )
    p.set_defaults(func=cmd_retry)


__all__ = ["cmd_retry", "register"]
