"""Creates what the topology describes on the emulators: topics (schema attached), push subscriptions, bucket."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deploy.local.services import REPO_ROOT
from deploy.topology import Topology


def _already_exists(exc: Exception) -> bool:
    from google.api_core.exceptions import AlreadyExists, Conflict

    return isinstance(exc, AlreadyExists | Conflict)


def create_topics(topology: Topology, project: str) -> None:
    from google.cloud import pubsub_v1
    from google.pubsub_v1.types import Encoding, Schema

    publisher = pubsub_v1.PublisherClient()
    schema_client = pubsub_v1.SchemaServiceClient()
    schema_path = f"projects/{project}/schemas/{topology.requests_schema_id}"
    definition = json.dumps(json.loads((REPO_ROOT / topology.requests_schema_file).read_text()))
    try:
        schema_client.create_schema(request={
            "parent": f"projects/{project}",
            "schema": Schema(name=schema_path, type_=Schema.Type.AVRO, definition=definition),
            "schema_id": topology.requests_schema_id,
        })
    except Exception as exc:
        if not _already_exists(exc):
            raise
    for topic in topology.topics:
        request: dict[str, Any] = {"name": f"projects/{project}/topics/{topic}"}
        if topic == topology.requests_topic:
            request["schema_settings"] = {"schema": schema_path, "encoding": Encoding.JSON}
        try:
            publisher.create_topic(request=request)
        except Exception as exc:
            if not _already_exists(exc):
                raise


def create_push_subscriptions(topology: Topology, project: str, function_ports: dict[str, int]) -> None:
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    for route in topology.functions:
        try:
            subscriber.create_subscription(request={
                "name": f"projects/{project}/subscriptions/{route.subscription}",
                "topic": f"projects/{project}/topics/{route.topic}",
                "push_config": {"push_endpoint": f"http://127.0.0.1:{function_ports[route.name]}/"},
                "ack_deadline_seconds": route.ack_deadline_seconds,
                "retry_policy": {"minimum_backoff": {"seconds": 1}, "maximum_backoff": {"seconds": 10}},
            })
        except Exception as exc:
            if not _already_exists(exc):
                raise
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


def default_state_dir() -> Path:
    return REPO_ROOT / ".landfall"
