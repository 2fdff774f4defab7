"""`landfall submit REQUEST.json`: check a TrainingRequest here, publish it on the requests topic, print its run id."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from landfall.errors import CommandError, client_boundary
from schemas.errors import SchemaError
from schemas.run_record import RunRecord, RunState, parse_run_record
from schemas.training_request import TrainingRequest, parse_training_request

PUBLISH_TIMEOUT_S = 30.0


def load_request(path: str) -> TrainingRequest:
    """The request in `path`, checked as the topic's schema and the dispatcher would; CommandError names the field."""
    from google.protobuf import json_format

    from schemas.proto import message_class

    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise CommandError(
            f"cannot read {path}: {exc.strerror}; pass a TrainingRequest JSON file "
            "(schemas/examples/training_request.json shows every field)"
        ) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CommandError(
            f"{path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}): a TrainingRequest is "
            "JSON, which the requests topic takes as UTF-8; save the file as UTF-8 and submit it again"
        ) from exc
    try:
        request = parse_training_request(text)
        json_format.Parse(text, message_class()())
    except SchemaError as exc:
        raise CommandError(
            f'{path}: {exc}; fix it and submit again (README "Publishing a TrainingRequest yourself" lists the fields)'
        ) from exc
    except json_format.ParseError as exc:
        raise CommandError(f"{path}: the requests topic would refuse it: {' '.join(str(exc).split())}") from exc
    return request


def publish(data: bytes) -> str:
    from google.api_core.exceptions import NotFound
    from google.cloud import pubsub_v1

    from functions.settings import get_settings

    with client_boundary("publish the request"):
        topic = get_settings().requests_topic_path
        try:
            return str(pubsub_v1.PublisherClient().publish(topic, data).result(timeout=PUBLISH_TIMEOUT_S))
        except NotFound as exc:
            raise CommandError(
                f"topic {topic} does not exist: `landfall up` creates it on the local stack, the "
                "deployer in Google Cloud"
            ) from exc


def already_ran(request: TrainingRequest, run: RunRecord) -> str:
    """What to say when the request's run exists: its key names that run, so publishing it again starts nothing."""
    key = request.idempotency_key
    how = (
        "its content is the same as that run's request (no idempotency_key: the key is a hash of the content)"
        if key.startswith("content:")
        else f"its idempotency_key {key!r} is that run's"
    )
    again = (
        f"`landfall retry {run.run_id}` runs it again as a new run"
        if run.state in (RunState.FAILED, RunState.CANCELLED)
        else "to run it again on purpose, give the request an idempotency_key of its own and submit it"
    )
    return (
        f"run {run.run_id} already exists ({run.state}): {how}, so nothing was published; {again}; "
        f"`landfall run {run.run_id}` shows it"
    )


def cmd_submit(args: argparse.Namespace) -> int:
    from landfall.commands.runs import read_run_document

    request = load_request(args.request)
    existing = read_run_document(request.run_id)
    if existing is not None:
        try:
            run = parse_run_record(existing)
        except SchemaError as exc:
            raise CommandError(
                f"run {request.run_id} already exists but does not fit the run record schema ({exc}); nothing "
                f"was published; `landfall run {request.run_id} --json` shows it as stored"
            ) from exc
        if args.json:
            print(
                json.dumps(
                    {
                        "run_id": run.run_id,
                        "idempotency_key": request.idempotency_key,
                        "message_id": None,
                        "already_exists": True,
                        "state": str(run.state),
                    },
                    indent=2,
                )
            )
        else:
            print(already_ran(request, run))
        return 0
    message_id = publish(Path(args.request).read_bytes())
    result: dict[str, Any] = {
        "run_id": request.run_id,
        "idempotency_key": request.idempotency_key,
        "message_id": message_id,
        "already_exists": False,
        "state": None,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"published {args.request} (message {message_id}); its run will be {request.run_id}: "
            f"`landfall watch {request.run_id}` follows it"
        )
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "submit",
        help="check a TrainingRequest JSON file, publish it, print its run id",
        description="Checks REQUEST.json here (the bad field is named), publishes it on the requests "
        "topic, and prints the id of the run it will start. Only dataset.uri, task and "
        "model.preset are required. A request whose run already exists (the same content, or the same "
        "idempotency_key) is not published again: the command names the run, its state and how to run "
        "it again on purpose.",
    )
    p.add_argument("request", metavar="REQUEST.json", help="a TrainingRequest as JSON")
    p.add_argument(
        "--json",
        action="store_true",
        help="print run_id, idempotency_key, message_id, already_exists and state as JSON",
    )
    p.set_defaults(func=cmd_submit)
