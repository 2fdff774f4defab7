"""`landfall submit REQUEST.json`: check a TrainingRequest here, publish it on the requests topic, print its run id."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from landfall.errors import CommandError, client_boundary
from schemas.errors import SchemaError
from schemas.training_request import TrainingRequest, parse_training_request

PUBLISH_TIMEOUT_S = 30.0


def load_request(path: str) -> TrainingRequest:
    """The request in `path`, checked as the topic's schema and the dispatcher would; CommandError names the field."""
    from google.protobuf import json_format

    from schemas.proto import message_class

    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise CommandError(
            f"cannot read {path}: {exc.strerror}; pass a TrainingRequest JSON file "
            "(schemas/examples/training_request.json shows every field)"
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


def cmd_submit(args: argparse.Namespace) -> int:
    request = load_request(args.request)
    message_id = publish(Path(args.request).read_bytes())
    result: dict[str, Any] = {
        "run_id": request.run_id,
        "idempotency_key": request.idempotency_key,
        "message_id": message_id,
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
        "model.preset are required.",
    )
    p.add_argument("request", metavar="REQUEST.json", help="a TrainingRequest as JSON")
    p.add_argument("--json", action="store_true", help="print run id, idempotency key and message id as JSON")
    p.set_defaults(func=cmd_submit)
