"""The local stack's Cloud Storage, checked against the IAM policy `landfall deploy` would set.

Every process on the local stack reaches fake-gcs-server through this gate, as a named principal: a function as its
service account, a job's replicas as the CustomJob's serviceAccount, the CLI as LANDFALL_IDENTITY where set (a team's
member), the person at the keyboard (gcloud, the CLI, the tests) as the project's owner. The principal rides in the
storage endpoint every client library honours: STORAGE_EMULATOR_HOST=http://HOST:PORT/as/MEMBER (deploy/topology.py
storage_as); a request with no /as/ prefix is the owner's. The gate maps each JSON API call to the permission Cloud
Storage checks for it (an upload that would replace an object also needs storage.objects.delete; a list is checked on
the bucket with the listed prefix as `storage.googleapis.com/objectListPrefix`), evaluates the caller's bindings
(deploy/local_iam/policy.py), and answers a refused call with Cloud Storage's own 403 body: `MEMBER does not have
storage.objects.get access to the Google Cloud Storage object. Permission 'storage.objects.get' denied on resource (or
it may not exist).` The client libraries raise it as google.api_core.exceptions.Forbidden, as in the cloud.

Links fake-gcs-server returns in a principal's JSON metadata (mediaLink, selfLink) and headers (a resumable upload's
Location, X-Goog-Upload-URL) are rewritten to come back through the gate as the same principal; an object's content is
never rewritten, and is streamed. Every permission a principal used, and the binding that allowed it, is appended once
to --record (JSON lines), so a test can compare what each identity used with what it was granted.

This shows what a grant allows; it is not a security boundary: a process on this machine can reach fake-gcs-server
directly, or call without /as/.

`python -m deploy.local_iam.storage_gate --port P --upstream http://HOST:PORT --landing B --code B
    --artifacts REGION=BUCKET,... [--teams-file F] [--readable B,...] [--record F] [--enforce | --no-enforce]`
prints storage_front.READY_LINE once it listens.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from email.parser import BytesParser
from email.policy import HTTP
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from deploy.gcp.config import load_deploy_config
from deploy.local.storage_front import LAYOUT_PATH, Front, FrontServer, serve_until_stopped
from deploy.local_iam.policy import Decision, Policy, Target, deployed_policy, local_names
from deploy.teams import read_teams
from deploy.topology import PRINCIPAL_PATH, load_topology

OWNER = "owner"
"""Who a request without /as/ comes from: the project's owner, allowed everything."""
_OBJECT = re.compile(r"^/(?:download/)?storage/v1/b/(?P<bucket>[^/]+)/o/(?P<object>[^/]+)$")
_OBJECTS = re.compile(r"^/(?:upload/)?storage/v1/b/(?P<bucket>[^/]+)/o$")
_BUCKET = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)$")
_COPY = re.compile(
    r"^/storage/v1/b/(?P<bucket>[^/]+)/o/(?P<object>[^/]+)/(?:copyTo|rewriteTo)/b/(?P<to_bucket>[^/]+)/o/(?P<to>[^/]+)$"
)
_COMPOSE = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)/o/(?P<object>[^/]+)/compose$")
IAM_CHECK_PATH = "/_landfall/iam/check"
"""Where the Vertex emulator asks whether a caller holds a permission on the project or a service account."""
MAX_METADATA_BODY = 64 << 20
"""The most of a multipart upload the gate reads to find the object's name (the client libraries send larger files
as resumable uploads, whose first request holds only the metadata)."""


@dataclass(frozen=True)
class Need:
    """One permission a call needs on one target."""

    permission: str
    target: Target
    on_object: bool = True


class Refused(Exception):
    def __init__(self, member: str, need: Need) -> None:
        what = "object" if need.target.object_name is not None else "bucket"
        email = member.partition(":")[2] or member
        self.message = (
            f"{email} does not have {need.permission} access to the Google Cloud Storage {what}. "
            f"Permission '{need.permission}' denied on resource (or it may not exist)."
        )
        super().__init__(self.message)


def forbidden_body(message: str) -> bytes:
    """Cloud Storage's JSON API error body for a 403."""
    error = {
        "code": 403,
        "message": message,
        "errors": [{"message": message, "domain": "global", "reason": "forbidden"}],
    }
    return json.dumps({"error": error}).encode()


def _query(path: str) -> dict[str, str]:
    """The query's parameters, each its first value (as fake-gcs-server, in Go, reads them)."""
    return {k: v[0] for k, v in parse_qs(urlsplit(path).query, keep_blank_values=True).items()}


def upload_name(path: str, headers: Any, body: bytes | None, bucket: str = "") -> str | None:
    """The object name an upload request creates: the `name` query parameter, else the metadata's (the JSON body of
    a resumable upload's first request, the first part of a multipart one). None (the call is refused) where the two
    disagree, or where the metadata names another bucket than the path: the server would act on the body's."""
    name = _query(path).get("name")
    metadata = _metadata(headers, body) if body else {}
    named, other = metadata.get("name"), metadata.get("bucket")
    if isinstance(other, str) and other and other != bucket:
        return None
    if name:
        return None if isinstance(named, str) and named and named != name else name
    return named if isinstance(named, str) and named else None


def _metadata(headers: Any, body: bytes | None) -> dict[str, Any]:
    """The JSON metadata of an upload request's body ({} where it holds none)."""
    if not body:
        return {}
    content_type = headers.get("Content-Type", "")
    if content_type.startswith("multipart/"):
        message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
        for part in message.iter_parts():
            payload = part.get_payload(decode=True)
            if isinstance(payload, bytes):
                return _json_object(payload)
        return {}
    return _json_object(body)


def _json_object(payload: bytes) -> dict[str, Any]:
    try:
        found = json.loads(payload)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def needs(method: str, path: str, headers: Any, body: bytes | None) -> list[Need] | None:
    """The permissions a JSON API call needs; None for a call the gate does not know (refused for any principal but
    the owner, naming the call)."""
    route = urlsplit(path).path
    query = _query(path)
    generation = query.get("ifGenerationMatch")
    if match := _COPY.fullmatch(route):
        dest = Target(unquote(match["to_bucket"]), unquote(match["to"]))
        source = Target(unquote(match["bucket"]), unquote(match["object"]))
        return [Need("storage.objects.get", source), _create(dest, generation)]
    if match := _COMPOSE.fullmatch(route):
        bucket = unquote(match["bucket"])
        sources = _json_object(body or b"").get("sourceObjects")
        if not isinstance(sources, list) or not all(
            isinstance(x, dict) and isinstance(x.get("name"), str) for x in sources
        ):
            return None
        reads = [Need("storage.objects.get", Target(bucket, x["name"])) for x in sources]
        return [*reads, _create(Target(bucket, unquote(match["object"])), generation)]
    if match := _OBJECT.fullmatch(route):
        target = Target(unquote(match["bucket"]), unquote(match["object"]))
        permission = {
            "GET": "storage.objects.get",
            "HEAD": "storage.objects.get",
            "DELETE": "storage.objects.delete",
            "PATCH": "storage.objects.update",
            "PUT": "storage.objects.update",
        }.get(method)
        return None if permission is None else [Need(permission, target)]
    if match := _OBJECTS.fullmatch(route):
        bucket = unquote(match["bucket"])
        if method == "GET":
            return [Need("storage.objects.list", Target(bucket, None, query.get("prefix", "")), on_object=False)]
        if method == "POST":
            name = upload_name(path, headers, body, bucket)
            if name is None:
                return None
            return [_create(Target(bucket, name), generation)]
        if method == "PUT" and "upload_id" in query:
            return []  # the rest of a resumable upload its first request was allowed to start
        return None
    if (match := LAYOUT_PATH.fullmatch(route)) and method == "GET":
        return [
            Need(
                "storage.objects.list", Target(unquote(match["bucket"]), None, query.get("prefix", "")), on_object=False
            )
        ]
    if (match := _BUCKET.fullmatch(route)) and method == "GET":
        return [Need("storage.buckets.get", Target(unquote(match["bucket"])), on_object=False)]
    return None


def _create(target: Target, generation_match: str | None) -> Need:
    return Need("storage.objects.create", target, on_object=generation_match != "0")


class Gate(Front):
    server: GateServer
    member: str = OWNER
    _body: bytes | None = None

    def _arrive(self) -> bool:
        """Take the principal off the path; check the call. False when it was refused (answered here)."""
        self.member, self._body = OWNER, None
        if self.path.startswith(PRINCIPAL_PATH):
            who, slash, rest = self.path[len(PRINCIPAL_PATH) :].partition("/")
            self.member, self.path = unquote(who), slash + rest
        if self.member == OWNER:
            return True
        route = urlsplit(self.path).path
        if self.command == "POST" and (_OBJECTS.fullmatch(route) or _COMPOSE.fullmatch(route)):
            if int(self.headers.get("Content-Length") or 0) > MAX_METADATA_BODY:
                self._refuse(
                    f"the local stack's storage gate reads at most {MAX_METADATA_BODY >> 20} MiB of an upload's first "
                    "request to find the object's name: send a larger object as a resumable upload"
                )
                return False
            self._body = super()._request_body()
        wanted = needs(self.command, self.path, self.headers, self._body)
        try:
            if wanted is None:
                call = f"{self.command} {route}"
                self.server.record_unknown(self.member, call)
                if not self.server.enforce:
                    return True
                self._refuse(
                    f"{self.member}: the local stack's storage gate does not know the call {call}, so it cannot "
                    "tell which permission it needs: teach deploy/local_iam/storage_gate.py needs() the permission "
                    "Cloud Storage documents for it"
                )
                return False
            for need in wanted:
                self._check(need)
        except Refused as refused:
            self._refuse(refused.message)
            return False
        return True

    def _check(self, need: Need) -> None:
        decision = self.server.decide(self.member, need.permission, need.target)
        if not decision.allowed:
            raise Refused(self.member, need)
        if need.permission == "storage.objects.create" and need.on_object and self._exists(need.target):
            replace = Need("storage.objects.delete", need.target)
            if not self.server.decide(self.member, replace.permission, replace.target).allowed:
                raise Refused(self.member, replace)

    def _exists(self, target: Target) -> bool:
        conn = self._connection()
        try:
            conn.request(
                "GET", f"/storage/v1/b/{quote(target.bucket, safe='')}/o/{quote(target.object_name or '', safe='')}"
            )
            answer = conn.getresponse()
            answer.read()
            return answer.status == 200
        finally:
            conn.close()

    def _refuse(self, message: str) -> None:
        body = forbidden_body(message)
        self.server.log_refusal(self.member, f"{self.command} {urlsplit(self.path).path}: {message}")
        unread = self._body is None and (
            self.headers.get("Content-Length") or "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        )
        self.send_response(403, "Forbidden")
        if unread:  # the refused request's body is not read: this connection ends with the answer
            self.send_header("Connection", "close")
            self.close_connection = True
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _request_body(self) -> bytes | None:
        return self._body if self._body is not None else super()._request_body()

    def header_value(self, key: str, value: str) -> str:
        if self.member != OWNER and key.lower() in ("location", "x-goog-upload-url"):  # an upload's session
            return value.replace(self.server.upstream_base, self.server.as_base(self.member))
        return value

    def relay(self, answer: http.client.HTTPResponse) -> None:
        """Pass the answer on; a principal's JSON metadata (not an object's content) with its links rewritten to come
        back through the gate as the same principal."""
        media = urlsplit(self.path).path.startswith("/download/") or _query(self.path).get("alt") == "media"
        metadata = answer.getheader("Content-Type", "").startswith("application/json") and not media
        if self.member == OWNER or not metadata or self.command == "HEAD":
            super().relay(answer)
            return
        body = answer.read().replace(self.server.upstream_base.encode(), self.server.as_base(self.member).encode())
        self.send_answer_head(answer)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def admitted(self) -> bool:
        return self._arrive()

    def do_POST(self) -> None:
        if self.path == IAM_CHECK_PATH:
            self._answer_check()
        else:
            self._serve()

    def _answer_check(self) -> None:
        """The local stack's IAM answer for a resource other than Cloud Storage's, asked by the Vertex emulator:
        {"member", "permission", "kind": "project" | "service_account", "name"} -> {"allowed", "grant"}."""
        try:
            asked = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            member, permission, kind, name = (str(asked[k]) for k in ("member", "permission", "kind", "name"))
        except (ValueError, KeyError, TypeError) as exc:
            body, status = json.dumps({"error": f"expected member, permission, kind and name: {exc}"}).encode(), 400
        else:
            decision = self.server.decide_resource(member, permission, kind, name)
            grant = decision.binding.describe() if decision.binding is not None else ""
            body, status = json.dumps({"allowed": decision.allowed, "grant": grant}).encode(), 200
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Decisions:
    """Decisions against the policy, each recorded once (with the grant that allowed it, else where it was refused)
    in one file of JSON lines: the storage gate's and the Pub/Sub gate's (deploy/local_iam/pubsub_gate.py)."""

    def __init__(self, policy: Callable[[], Policy], *, enforce: bool = True, record: Path | None = None) -> None:
        self.policy, self.enforce, self.record = policy, enforce, record
        self._seen: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()

    def _write_once(self, key: tuple[str, str, str], line: dict[str, Any]) -> None:
        with self._lock:
            if key in self._seen:
                return
            self._seen.add(key)
            if self.record is not None:
                with self.record.open("a") as out:
                    out.write(json.dumps(line) + "\n")

    def decide(self, member: str, permission: str, target: Target) -> Decision:
        decision = self.policy().check(member, permission, target)
        return self._recorded(member, permission, decision, {"bucket": target.bucket, "object": target.object_name})

    def decide_resource(self, member: str, permission: str, kind: str, name: str) -> Decision:
        """As decide, for a resource other than Cloud Storage's: the project, a service account, a topic."""
        decision = self.policy().check_resource(member, permission, kind, name)
        return self._recorded(member, permission, decision, {"kind": kind, "name": name})

    def _recorded(self, member: str, permission: str, decision: Decision, where: dict[str, Any]) -> Decision:
        """Record a decision once; what the caller is answered: the decision, or allowed when not enforcing."""
        binding = decision.binding
        line: dict[str, Any] = {"member": member, "permission": permission, "allowed": decision.allowed}
        line |= where if binding is None else {"role": binding.role, "resource": binding.resource.name}
        # a refusal once per resource (per bucket for objects: a script refused object after object stays one line)
        refused_on = json.dumps({k: v for k, v in where.items() if k != "object"}, sort_keys=True)
        key = refused_on if binding is None else f"{binding.role} {binding.resource.name}"
        self._write_once((member, permission, key), line)
        return decision if self.enforce or decision.allowed else Decision(True)

    def record_unknown(self, member: str, call: str) -> None:
        """A call of a principal the gate cannot map to a permission: recorded (refused unless not enforcing)."""
        self._write_once((member, call, "?"), {"member": member, "call": call, "allowed": False, "unknown": True})


class GateServer(FrontServer, Decisions):
    def __init__(
        self,
        port: int,
        upstream: str,
        policy: Callable[[], Policy],
        *,
        enforce: bool = True,
        record: Path | None = None,
        quiet: bool = False,
        host: str = "127.0.0.1",
    ) -> None:
        FrontServer.__init__(self, port, upstream, host, Gate)
        Decisions.__init__(self, policy, enforce=enforce, record=record)
        self.upstream_base = f"http://{self.upstream_host}:{self.upstream_port}"
        self.base = f"http://{host}:{self.server_address[1]}"
        self.quiet = quiet

    def as_base(self, member: str) -> str:
        return f"{self.base}{PRINCIPAL_PATH}{quote(member, safe=':@')}"

    def log_refusal(self, member: str, message: str) -> None:
        """A refusal, in the gate's log (the stack's logs/storage_front.log); none when quiet (in a test's process)."""
        if not self.quiet:
            print(f"refused {member}: {message}", file=sys.stderr, flush=True)


class PolicySource:
    """The deployed policy for the local stack's names, rebuilt when the teams file changes."""

    def __init__(
        self, landing: str, code: str, artifacts: dict[str, str], teams_file: str, readable: tuple[str, ...] = ()
    ) -> None:
        self.landing, self.code, self.artifacts, self.teams_file = landing, code, artifacts, teams_file
        self.readable = readable
        self._stamp: float | None = None
        self._policy: Policy | None = None
        self._lock = threading.Lock()

    def __call__(self) -> Policy:
        """The policy for the teams file as it is now; while an edit leaves the file unreadable, the last good one
        (as the functions keep the last good teams file, deploy/reloading.py), said once in the gate's log."""
        with self._lock:
            try:
                stamp = os.stat(self.teams_file).st_mtime if self.teams_file else 0.0
                if self._policy is None or stamp != self._stamp:
                    self._policy, self._stamp = self._build(), stamp
            except (OSError, ValueError) as exc:
                if self._policy is None:
                    raise
                if self._stamp != -1.0:
                    print(f"teams file {self.teams_file} unreadable, keeping the last policy: {exc}", file=sys.stderr)
                self._stamp = -1.0
            return self._policy

    def _build(self) -> Policy:
        topology, config = load_topology(), load_deploy_config()
        names = local_names(topology, config, self.artifacts, self.landing, self.code)
        policy = deployed_policy(config, names, read_teams(self.teams_file), topology.runs_prefix)
        return policy.granted_alike(self.landing, self.readable)


def parse_artifacts(text: str) -> dict[str, str]:
    pairs = [p.partition("=") for p in text.split(",") if p.strip()]
    return {region.strip(): bucket.strip() for region, _, bucket in pairs}


def add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """The gates' arguments for the policy they hold and where they record (this gate's and the Pub/Sub gate's)."""
    parser.add_argument("--landing", required=True)
    parser.add_argument("--code", required=True)
    parser.add_argument("--artifacts", required=True, help="REGION=BUCKET,...")
    parser.add_argument("--teams-file", default="")
    parser.add_argument(
        "--readable",
        default="",
        help="BUCKET,...: other buckets data may land in, opened to Landfall's readers as the landing bucket is",
    )
    parser.add_argument("--record", type=Path)
    parser.add_argument("--enforce", action=argparse.BooleanOptionalAction, default=True)


def policy_from(args: argparse.Namespace) -> PolicySource:
    """The policy those arguments name, built once here: a bad teams file or topology fails at start, not on the first
    call."""
    readable = tuple(b.strip() for b in args.readable.split(",") if b.strip())
    policy = PolicySource(args.landing, args.code, parse_artifacts(args.artifacts), args.teams_file, readable)
    policy()
    return policy


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.local_iam.storage_gate", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="fake-gcs-server's http://HOST:PORT")
    add_policy_arguments(parser)
    args = parser.parse_args(argv)
    server = GateServer(args.port, args.upstream, policy_from(args), enforce=args.enforce, record=args.record)
    threading.Thread(target=server.serve_forever, name="storage-gate", daemon=True).start()
    return serve_until_stopped(server)


if __name__ == "__main__":
    sys.exit(main())
