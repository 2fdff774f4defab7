"""Cloud Functions entry points (functions-framework). Each decodes its event, calls a plain handler, and either
returns (acknowledge) or raises (the platform redelivers). Handlers and their dependencies live beside this file."""

from __future__ import annotations

import base64
import importlib
import json
import logging
import sys
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import functions_framework

from functions import envelopes
from functions.errors import MissingPermission, PermanentError, TransientError
from functions.settings import function_target
from schemas.errors import SchemaError
from schemas.times import parse_timestamp

# An unexpected error is retried, but not forever: past this age the message is acknowledged and logged.
GIVE_UP_AFTER = timedelta(minutes=30)


class _JsonLines(logging.Formatter):
    """One JSON object per line: Cloud Logging reads severity and message from it."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {"severity": record.levelname, "message": record.getMessage(), "logger": record.name}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def _setup_logging() -> logging.Logger:
    # The process's own stdout (Cloud Logging reads it), never a stand-in some caller had put in sys.stdout when this
    # module was imported: a test runner's capture closes its stand-ins, and the handler then wrote into a closed file.
    handler = logging.StreamHandler(sys.__stdout__)
    handler.setFormatter(_JsonLines())
    root = logging.getLogger("landfall")
    if not root.handlers:
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        root.propagate = False
    return root


log = _setup_logging()

WARM_IMPORTS: dict[str, tuple[str, ...]] = {
    "on_object_finalized": (
        "functions.ingest.handler",
        "functions.wiring",
        "google.cloud.firestore",
        "google.cloud.storage",
        "google.cloud.pubsub_v1",
    ),
    "dispatch": (
        "functions.dispatch.handler",
        "functions.wiring",
        "functions.planning",
        "google.cloud.firestore",
        "google.cloud.storage",
        "google.cloud.aiplatform_v1.services.job_service",
    ),
    "on_job_event": (
        "functions.listener.handler",
        "functions.wiring",
        "google.cloud.firestore",
        "google.cloud.storage",
        "google.cloud.aiplatform_v1.services.job_service",
    ),
}
"""What an entry point's first message would import (its handler, the wiring, the client libraries: 2-3.5 CPU-s,
the Vertex AI library alone 1.9), imported when its instance starts instead: FUNCTION_TARGET (set by Cloud Run
functions, and by the local stack) names the entry point. Before the server answers, so before any message, and
before gunicorn forks its worker, which inherits the modules. Only modules: the clients are still made on first use
(functions/gcp/clients.py). The functions a schedule ticks once a minute start without."""


def _warm(target: str) -> None:
    for module in WARM_IMPORTS.get(target, ()):
        importlib.import_module(module)


_warm(function_target())


def _age(cloud_event: Any) -> timedelta:
    try:
        published = parse_timestamp(str(cloud_event["time"]), field="time")
    except (KeyError, SchemaError):
        return timedelta(0)
    return datetime.now(UTC) - published


def _message_id(cloud_event: Any) -> str:
    """The event's id: for a Pub/Sub push, the message id that publishing it returned."""
    try:
        return str(cloud_event["id"])
    except (KeyError, TypeError):
        return "?"


def _event_id(cloud_event: Any) -> str:
    """The event's id (for a Pub/Sub push, the message id) and, for a Pub/Sub message, the digest of its body:
    a dead-lettered message gets a new id, so `landfall dead-letters` finds these lines by the digest."""
    ident = _message_id(cloud_event)
    data = getattr(cloud_event, "data", None)
    message = data.get("message") if isinstance(data, Mapping) else None
    if not isinstance(message, Mapping):
        return ident
    try:
        body = base64.b64decode(message.get("data") or b"")
    except (ValueError, TypeError):
        return ident
    return f"{ident} ({envelopes.BODY_DIGEST_LABEL}{envelopes.body_digest(body)})"


def _grants_settling() -> bool:
    """Whether this deployment's grants may still be propagating (Settings.grants_settling); False when the
    settings do not read (the error that follows says why)."""
    from functions.settings import SettingsError, get_settings

    try:
        return get_settings().grants_settling(datetime.now(UTC))
    except SettingsError:
        return False


def _run(name: str, cloud_event: Any, work: Callable[[], str]) -> None:
    try:
        outcome = work()
    except MissingPermission as exc:
        if _grants_settling():
            log.warning(
                "%s: message %s will be retried (a grant may still be propagating): %s",
                name,
                _event_id(cloud_event),
                exc,
            )
            raise TransientError(str(exc)) from exc
        log.error("%s: message %s acknowledged without retry: %s", name, _event_id(cloud_event), exc)
        return
    except (PermanentError, SchemaError) as exc:
        log.error("%s: message %s acknowledged without retry: %s", name, _event_id(cloud_event), exc)
        return
    except TransientError as exc:
        log.warning("%s: message %s will be retried: %s", name, _event_id(cloud_event), exc)
        raise
    except Exception:
        if _age(cloud_event) > GIVE_UP_AFTER:
            log.exception(
                "%s: message %s failed for over %s; acknowledged so it stops retrying",
                name,
                _event_id(cloud_event),
                GIVE_UP_AFTER,
            )
            return
        log.exception("%s: message %s: unexpected error; will be retried", name, _event_id(cloud_event))
        raise
    # The message id closes the line, so that `landfall reconcile` finds the summary of the pass its tick started.
    log.info("%s: %s (message %s)", name, outcome, _message_id(cloud_event))


@functions_framework.cloud_event
def on_object_finalized(cloud_event: Any) -> None:
    from functions.ingest.handler import handle_object_event
    from functions.wiring import ingest_deps

    _run(
        "on_object_finalized",
        cloud_event,
        lambda: handle_object_event(envelopes.object_event(cloud_event), ingest_deps()),
    )


@functions_framework.cloud_event
def dispatch(cloud_event: Any) -> None:
    from functions.dispatch.handler import handle_training_request
    from functions.wiring import dispatch_deps

    _run(
        "dispatch", cloud_event, lambda: handle_training_request(envelopes.pubsub_message(cloud_event), dispatch_deps())
    )


@functions_framework.cloud_event
def on_job_event(cloud_event: Any) -> None:
    from functions.listener.handler import handle_job_event
    from functions.wiring import listener_deps

    _run("on_job_event", cloud_event, lambda: handle_job_event(envelopes.pubsub_message(cloud_event), listener_deps()))


@functions_framework.cloud_event
def sweep_datasets(cloud_event: Any) -> None:
    from functions.ingest.sweep import handle_sweep
    from functions.wiring import ingest_deps

    _run("sweep_datasets", cloud_event, lambda: handle_sweep(envelopes.pubsub_message(cloud_event), ingest_deps()))


@functions_framework.cloud_event
def reconcile_runs(cloud_event: Any) -> None:
    from functions.reconciler.handler import reconcile
    from functions.wiring import reconciler_deps

    _run("reconcile_runs", cloud_event, lambda: reconcile(reconciler_deps()))
