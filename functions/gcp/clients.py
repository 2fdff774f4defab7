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
    """The Pub/Sub publisher; on the local stack, as the identity this process acts as (`local_principal`): its
    publishes carry it (deploy/topology.py PRINCIPAL_METADATA) and the stack's Pub/Sub gate holds them to its grants
    (deploy/local_iam/pubsub_gate.py), as a project's Pub/Sub holds a function's credentials to its account's."""
    from google.cloud import pubsub_v1

    batching = pubsub_v1.types.BatchSettings(max_messages=PUBLISH_AT_ONCE)
    host, member = get_settings().pubsub_emulator_host, local_principal()
    if host and member:
        from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

        transport = PublisherGrpcTransport(channel=principal_channel(host, member))
        return pubsub_v1.PublisherClient(batch_settings=batching, transport=transport)
    return pubsub_v1.PublisherClient(batch_settings=batching)


def local_principal() -> str:
    """Who this process acts as on the local stack: the MEMBER its storage endpoint ends with (/as/MEMBER, deploy/
    topology.py storage_as: a function's account, a member LANDFALL_IDENTITY names); "" for the owner, or in Google
    Cloud (where credentials say who calls)."""
    from urllib.parse import unquote

    from deploy.topology import PRINCIPAL_PATH

    _, found, member = get_settings().storage_emulator_host.partition(PRINCIPAL_PATH)
    return unquote(member) if found else ""


@cache
def storage_client() -> Any:
    from google.cloud import storage

    if get_settings().storage_emulator_host:
        from google.auth.credentials import AnonymousCredentials

        client = storage.Client(project=get_settings().project, credentials=AnonymousCredentials())
    else:
        client = storage.Client(project=get_settings().project)
    environment_read_once(client._http, client._connection.API_BASE_URL)  # the library's requests session
    return client


def environment_read_once(session: Any, url: str) -> bool:
    """Have a requests session read the process environment once instead of on every call to url; True when it does.

    With `trust_env` set (requests' default) every call reads the proxy variables (with NO_PROXY), the CA bundle
    variables and ~/.netrc again: about a third of a small Cloud Storage read's CPU in the dispatcher
    (bench/dispatch_cpu.py). A function's environment does not change while it runs, so where no proxy applies to
    url and no .netrc entry names it, the session keeps what requests' own reading gives (its CA bundle) and stops
    reading. Where a proxy or a .netrc entry applies, the session is left as it is."""
    from requests.utils import get_netrc_auth

    found = session.merge_environment_settings(url, {}, None, None, None)  # requests' own reading, once
    if found.get("proxies") or get_netrc_auth(url) is not None:
        return False
    session.verify = found.get("verify", session.verify)
    session.trust_env = False
    return True


@cache
def job_service_client(region: str) -> Any:
    """A JobServiceClient for region: Google's regional endpoint, or the Vertex emulator when configured."""
    from google.cloud.aiplatform_v1.services.job_service import JobServiceClient

    endpoint = get_settings().vertex_endpoint
    if endpoint:
        from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport

        return JobServiceClient(transport=JobServiceGrpcTransport(channel=emulator_channel(endpoint)))
    return JobServiceClient(client_options={"api_endpoint": f"{region}-aiplatform.googleapis.com"})


@cache
def model_service_client(region: str) -> Any:
    """A ModelServiceClient for region (Vertex AI Model Registry): Google's regional endpoint, or the Vertex emulator
    when configured (the same setting as the JobService client's)."""
    from google.cloud.aiplatform_v1.services.model_service import ModelServiceClient

    endpoint = get_settings().vertex_endpoint
    if endpoint:
        from google.cloud.aiplatform_v1.services.model_service.transports import ModelServiceGrpcTransport

        return ModelServiceClient(transport=ModelServiceGrpcTransport(channel=emulator_channel(endpoint)))
    return ModelServiceClient(client_options={"api_endpoint": f"{region}-aiplatform.googleapis.com"})


def emulator_channel(endpoint: str) -> Any:
    """The Vertex emulator's channel for LANDFALL_VERTEX_ENDPOINT, HOST:PORT or HOST:PORT/as/MEMBER: on the local
    stack each function's endpoint names the account it runs as, and every call carries it (gRPC metadata
    deploy/topology.py PRINCIPAL_METADATA), as a call's credentials name the caller to Vertex AI; the emulator then
    holds it to that account's grants."""
    import grpc

    from deploy.topology import PRINCIPAL_PATH

    target, _, member = endpoint.partition(PRINCIPAL_PATH)
    return principal_channel(target, member) if member else grpc.insecure_channel(target)


def principal_channel(target: str, member: str) -> Any:
    """An emulator's insecure channel whose every unary call names member (gRPC metadata PRINCIPAL_METADATA)."""
    import grpc

    from deploy.topology import PRINCIPAL_METADATA

    caller = ((PRINCIPAL_METADATA, member),)

    class Caller(grpc.UnaryUnaryClientInterceptor):
        """Adds the caller to every unary call (the JobService's, the ModelService's and Publish are unary)."""

        def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
            # grpc's call details are a namedtuple
            return continuation(details._replace(metadata=(*(details.metadata or ()), *caller)), request)

    return grpc.intercept_channel(grpc.insecure_channel(target), Caller())
