"""Cloud Functions entry points that do nothing, or only what functions/main.py's `dispatch` does around its
handler: bench/server_cpu.py starts a functions-framework server on them exactly as the local stack starts a function
(deploy/local/services.py `function`, this file as its --source), so that the server's own CPU per delivery and at
idle is measured apart from the handler's (bench/dispatch_cpu.py). None of them calls Firestore, Pub/Sub or Vertex.
"""

from __future__ import annotations

from typing import Any

import functions_framework

from functions import envelopes
from functions.main import log
from schemas.training_request import parse_training_request


@functions_framework.cloud_event
def noop(cloud_event: Any) -> None:
    """Acknowledge the delivery: what the server costs with nothing behind it (HTTP, Flask, the push body turned
    into a CloudEvent)."""


@functions_framework.cloud_event
def entry(cloud_event: Any) -> None:
    """What functions/main.py's `dispatch` adds around its handler: the Pub/Sub message decoded from the event, and
    the one line it logs per delivery (the same logger and format, this entry point's name in it)."""
    message = envelopes.pubsub_message(cloud_event)
    log.info("%s: %s (message %s)", "entry", f"decoded:{len(message.data)} bytes", message.message_id)


@functions_framework.cloud_event
def decode(cloud_event: Any) -> None:
    """`entry` plus the TrainingRequest parsed from the message (its object list's digest checked): the first thing
    the dispatcher's handler does, so bench/dispatch_cpu.py's figure already counts this part."""
    message = envelopes.pubsub_message(cloud_event)
    request = parse_training_request(message.data)
    log.info("%s: %s (message %s)", "decode", f"decoded:{request.run_id}", message.message_id)
