"""The local stack's Pub/Sub publish, checked against the IAM policy `landfall deploy` would set.

A gRPC front for the Pub/Sub emulator. The processes that act as someone reach Pub/Sub through it: each function
(its service account) and the CLI run as a team's member (LANDFALL_IDENTITY). Their calls carry the principal in gRPC
metadata (deploy/topology.py PRINCIPAL_METADATA; functions/gcp/clients.py publisher_client sends it, taking the
process's identity from its storage endpoint's /as/MEMBER), as a call's credentials name the caller to Pub/Sub; a call
that names nobody is the project owner's, allowed everything (the stack's own set-up, the tests, gcloud).

Publish is checked: the caller must hold `pubsub.topics.publish` on the topic (roles/pubsub.publisher on it, or on the
project). A refusal is answered as Pub/Sub answers it, PERMISSION_DENIED "User not authorized to perform this
action.", which the client library raises as google.api_core.exceptions.PermissionDenied. Every other call passes
through unchecked. Each decision (and the grant that allowed it) is appended once to --record, the storage gate's
file, so a test can compare what each identity used with what it was granted (tests/iam_use.py).

Like the storage gate, this shows what a grant allows; it is not a security boundary: a process on this machine can
reach the emulator directly.

`python -m deploy.local_iam.pubsub_gate --port P --upstream HOST:PORT --landing B --code B --artifacts REGION=BUCKET,...
    [--teams-file F] [--readable B,...] [--record F] [--enforce | --no-enforce]` prints
deploy/local/storage_front.py READY_LINE once it listens, as the storage gate does.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from typing import Any

import grpc

from deploy.local.storage_front import READY_LINE
from deploy.local_iam.policy import Decision
from deploy.local_iam.storage_gate import Decisions, add_policy_arguments, policy_from
from deploy.topology import PRINCIPAL_METADATA

PUBLISH = "/google.pubsub.v1.Publisher/Publish"
PUBLISH_PERMISSION = "pubsub.topics.publish"
REFUSED = "User not authorized to perform this action."
"""Pub/Sub's own answer to a publish its caller may not make (PERMISSION_DENIED)."""
STREAMING = frozenset({"/google.pubsub.v1.Subscriber/StreamingPull"})
"""The emulator's one bidirectional stream; every other method is unary."""
OWNER = "owner"

Decide = Callable[[str, str, str, str], Decision]
"""(member, permission, resource kind, resource name) -> the decision, recorded."""


def caller(metadata: Sequence[tuple[str, Any]] | None) -> str:
    """The principal a call's metadata names; OWNER when it names none."""
    for key, value in metadata or ():
        if key == PRINCIPAL_METADATA and value:
            return str(value)
    return OWNER


def topic_of(request: bytes) -> str:
    """The topic id a serialized PublishRequest publishes to ("" when it does not read)."""
    from google.pubsub_v1.types import PublishRequest

    try:
        return str(PublishRequest.deserialize(request).topic).rsplit("/", 1)[-1]
    except Exception:  # a body that is no PublishRequest: the emulator answers it as it would
        return ""


class Forward(grpc.GenericRpcHandler):
    """Every method forwarded to the emulator as bytes; Publish checked first."""

    def __init__(self, channel: grpc.Channel, decide: Decide) -> None:
        self.channel, self.decide = channel, decide

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = str(handler_call_details.method)
        if method in STREAMING:
            return grpc.stream_stream_rpc_method_handler(self._stream(method))
        return grpc.unary_unary_rpc_method_handler(self._unary(method))

    def _unary(self, method: str) -> Callable[[bytes, grpc.ServicerContext], bytes]:
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self.channel.unary_unary(method)

        def handle(request: bytes, context: grpc.ServicerContext) -> bytes:
            member = caller(context.invocation_metadata())
            if method == PUBLISH and member != OWNER:
                topic = topic_of(request)
                if not self.decide(member, PUBLISH_PERMISSION, "topic", topic).allowed:
                    context.abort(grpc.StatusCode.PERMISSION_DENIED, REFUSED)
            try:
                return bytes(call(request, timeout=context.time_remaining()))
            except grpc.RpcError as exc:
                context.abort(exc.code(), exc.details() or "")
                raise  # not reached: abort raises

        return handle

    def _stream(self, method: str) -> Callable[[Iterator[bytes], grpc.ServicerContext], Iterator[bytes]]:
        call: grpc.StreamStreamMultiCallable[bytes, bytes] = self.channel.stream_stream(method)

        def handle(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
            responses = call(requests)

            def cancel() -> None:
                responses.cancel()

            context.add_callback(cancel)
            try:
                yield from responses
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.CANCELLED:
                    context.abort(exc.code(), exc.details() or "")

        return handle


def serve(port: int, upstream: str, decide: Decide, host: str = "127.0.0.1") -> tuple[grpc.Server, int]:
    """The gate listening on host:port (0: a free port) in front of the emulator at upstream; (server, port)."""
    channel = grpc.insecure_channel(upstream)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="pubsub-gate"))
    server.add_generic_rpc_handlers((Forward(channel, decide),))
    bound = server.add_insecure_port(f"{host}:{port}")
    server.start()
    return server, bound


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.local_iam.pubsub_gate", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="the Pub/Sub emulator's HOST:PORT")
    add_policy_arguments(parser)
    args = parser.parse_args(argv)
    # decided and recorded as the storage gate decides: one policy, one file of what each identity used
    decisions = Decisions(policy_from(args), enforce=args.enforce, record=args.record)
    server, bound = serve(args.port, args.upstream, decisions.decide_resource)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"{READY_LINE} on 127.0.0.1:{bound}", flush=True)
    stop.wait()
    server.stop(grace=1).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
