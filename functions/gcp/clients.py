"""Google Cloud clients, created lazily once per instance (never at import time) and shared by the handlers.

Each import sits inside its function: a function instance only pays for the clients it uses (cold start).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from functions.settings import get_settings


@cache
def firestore_client() -> Any:
    from google.cloud import firestore

    return firestore.Client(project=get_settings().project)


PUBLISH_AT_ONCE = 1
"""Messages per publish batch. Each delivery publishes one message and waits for its id, so a batch never fills:
the client's default (up to 100 messages, 10 ms) only held every publish back by its max_latency."""


@cache
def publisher_client() -> Any:
    from google.cloud import pubsub_v1

    return pubsub_v1.PublisherClient(batch_settings=pubsub_v1.types.BatchSettings(max_messages=PUBLISH_AT_ONCE))


@cache
def storage_client() -> Any:
    from google.cloud import storage

    if get_settings().storage_emulator_host:
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(project=get_settings().project, credentials=AnonymousCredentials())
    return storage.Client(project=get_settings().project)


@cache
def job_service_client(region: str) -> Any:
    """A JobServiceClient for region: Google's regional endpoint, or the Vertex emulator when configured."""
    from google.cloud.aiplatform_v1.services.job_service import JobServiceClient

    endpoint = get_settings().vertex_endpoint
    if endpoint:
        import grpc
        from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport

        return JobServiceClient(transport=JobServiceGrpcTransport(channel=grpc.insecure_channel(endpoint)))
    return JobServiceClient(client_options={"api_endpoint": f"{region}-aiplatform.googleapis.com"})


@cache
def model_service_client(region: str) -> Any:
    """A ModelServiceClient for region (Vertex AI Model Registry): Google's regional endpoint, or the Vertex emulator
    when configured (the same setting as the JobService client's)."""
    from google.cloud.aiplatform_v1.services.model_service import ModelServiceClient

    endpoint = get_settings().vertex_endpoint
    if endpoint:
        import grpc
        from google.cloud.aiplatform_v1.services.model_service.transports import ModelServiceGrpcTransport

        return ModelServiceClient(transport=ModelServiceGrpcTransport(channel=grpc.insecure_channel(endpoint)))
    return ModelServiceClient(client_options={"api_endpoint": f"{region}-aiplatform.googleapis.com"})
