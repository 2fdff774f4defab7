"""Creates what the topology describes on the emulators: topics (schema attached), subscriptions, bucket."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

from deploy.local.services import REPO_ROOT
from deploy.teams import team_topics
from deploy.topology import Topology

log = logging.getLogger(__name__)


def _already_exists(exc: Exception) -> bool:
    from google.api_core.exceptions import AlreadyExists, Conflict

    return isinstance(exc, AlreadyExists | Conflict)


def create_topics(topology: Topology, project: str) -> bool:
    """Creates the topics; the requests topic carries the Protocol Buffer schema (JSON encoding). Returns whether the
    schema is attached: Google's Pub/Sub emulator (0.8.x) answers "Protocol buffer support not implemented", and
    then the requests topic is created without one (the CLI's `landfall submit` and the dispatcher still check every
    message; only the publish-time refusal is Google Cloud's alone)."""
    from google.api_core.exceptions import MethodNotImplemented
    from google.cloud import pubsub_v1
    from google.pubsub_v1.types import Encoding, Schema

    publisher = pubsub_v1.PublisherClient()
    schema_client = pubsub_v1.SchemaServiceClient()
    schema_path = f"projects/{project}/schemas/{topology.requests_schema_id}"
    definition = (REPO_ROOT / topology.requests_schema_file).read_text()
    attached = True
    try:
        schema_client.create_schema(
            request={
                "parent": f"projects/{project}",
                "schema": Schema(name=schema_path, type_=Schema.Type.PROTOCOL_BUFFER, definition=definition),
                "schema_id": topology.requests_schema_id,
            }
        )
    except MethodNotImplemented:
        attached = False
        log.warning(
            "the Pub/Sub emulator takes no Protocol Buffer schema: %s is created without one", topology.requests_topic
        )
    except Exception as exc:
        if not _already_exists(exc):
            raise
    teams = tuple(t.requests_topic for t in team_topics(os.environ))  # each team's own requests topic (docs/teams.md)
    for topic in (*topology.topics, *teams):
        request: dict[str, Any] = {"name": f"projects/{project}/topics/{topic}"}
        if (topic == topology.requests_topic or topic in teams) and attached:
            request["schema_settings"] = {"schema": schema_path, "encoding": Encoding.JSON}
        try:
            publisher.create_topic(request=request)
        except Exception as exc:
            if not _already_exists(exc):
                raise
    return attached


def subscription_requests(topology: Topology, project: str) -> list[dict[str, Any]]:
    """CreateSubscription requests for the local stack: one pull subscription per function, with its ack deadline
    and dead-letter policy (the delivery bridge pushes from it and applies the retry back-off: deploy/local/bridge.py),
    and the subscription that holds dead letters."""
    requests: list[dict[str, Any]] = [
        {
            "name": f"projects/{project}/subscriptions/{route.subscription}",
            "topic": f"projects/{project}/topics/{route.topic}",
            "ack_deadline_seconds": route.ack_deadline_seconds,
            "dead_letter_policy": {
                "dead_letter_topic": f"projects/{project}/topics/{route.dead_letter.topic}",
                "max_delivery_attempts": route.dead_letter.max_delivery_attempts,
            },
        }
        for route in topology.functions
    ]
    dispatch = topology.fed_by(topology.requests_topic)
    requests += [  # a team's requests topic reaches the dispatcher through its own subscription, as in Google Cloud
        {
            **next(r for r in requests if r["name"].endswith(f"/{dispatch.subscription}")),
            "name": f"projects/{project}/subscriptions/{team.requests_subscription}",
            "topic": f"projects/{project}/topics/{team.requests_topic}",
        }
        for team in team_topics(os.environ)
    ]
    requests.append(
        {
            "name": f"projects/{project}/subscriptions/{topology.dead_letter_subscription}",
            "topic": f"projects/{project}/topics/{topology.dead_letter_topic}",
        }
    )
    return requests


def create_subscriptions(topology: Topology, project: str) -> None:
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    try:
        for request in subscription_requests(topology, project):
            try:
                subscriber.create_subscription(request=request)
            except Exception as exc:
                if not _already_exists(exc):
                    raise
    finally:
        subscriber.close()


def create_bucket(bucket: str, project: str) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(project=project, credentials=AnonymousCredentials())
    try:
        client.create_bucket(bucket)
    except Exception as exc:
        if not _already_exists(exc):
            raise


WARM_DOCUMENT = "landfall-warm-up"
"""A document id no record uses: the warm-up reads it and refuses to update it (it never exists)."""


def warm_firestore(host: str, project: str, collection: str) -> None:
    """The Firestore emulator's first read, query, transaction and commit each take 0.1-0.6 s (its JVM loading and
    compiling their paths), which the first dataset's ingest and dispatcher paid one after another. `up` makes them
    here, writing nothing, on a thread of its own beside the next services' start. Its own channel to host: the
    process's environment is the stack's only while `up` provisions."""
    import grpc
    from google.api_core import exceptions as gexc
    from google.cloud.firestore_v1.services.firestore import FirestoreClient
    from google.cloud.firestore_v1.services.firestore.transports import FirestoreGrpcTransport
    from google.cloud.firestore_v1.types import (
        BatchGetDocumentsRequest,
        BeginTransactionRequest,
        CommitRequest,
        Precondition,
        RollbackRequest,
        RunQueryRequest,
        StructuredQuery,
        TransactionOptions,
        Write,
    )
    from google.cloud.firestore_v1.types import Document as FirestoreDocument

    channel = grpc.insecure_channel(host)
    client = FirestoreClient(transport=FirestoreGrpcTransport(channel=channel))
    database = f"projects/{project}/databases/(default)"
    name = f"{database}/documents/{collection}/{WARM_DOCUMENT}"
    try:
        list(client.batch_get_documents(BatchGetDocumentsRequest(database=database, documents=[name])))
        query = StructuredQuery(
            from_=[StructuredQuery.CollectionSelector(collection_id=collection)], limit={"value": 1}
        )
        list(client.run_query(RunQueryRequest(parent=f"{database}/documents", structured_query=query)))
        began = client.begin_transaction(
            BeginTransactionRequest(database=database, options=TransactionOptions(read_write={}))
        )
        list(
            client.batch_get_documents(
                BatchGetDocumentsRequest(database=database, documents=[name], transaction=began.transaction)
            )
        )
        client.rollback(RollbackRequest(database=database, transaction=began.transaction))
        refused = Write(update=FirestoreDocument(name=name), current_document=Precondition(exists=True))
        with contextlib.suppress(gexc.NotFound):
            client.commit(CommitRequest(database=database, writes=[refused]))
    finally:
        channel.close()


STATE_DIR_ENV = "LANDFALL_STATE_DIR"
"""Where the local stack keeps its state, logs and data (default: .landfall in the repository)."""


def default_state_dir() -> Path:
    return Path(os.environ.get(STATE_DIR_ENV) or REPO_ROOT / ".landfall")
