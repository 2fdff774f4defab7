"""The Cloud Storage front of the local stack: fake-gcs-server, plus what gcloud asks that
fake-gcs-server does not serve.

`gcloud storage cp -r DIR gs://BUCKET/PREFIX/` (and `rsync`, and any wildcard copy into a bucket) first reads the
bucket's storage layout (`GET /storage/v1/b/BUCKET/storageLayout`) to learn whether it has a hierarchical namespace,
and stops at the 404 fake-gcs-server answers. This front answers that call the way Cloud Storage answers it for a
bucket without a hierarchical namespace (built from the bucket's own metadata; a missing bucket is fake-gcs-server's
404) and passes every other request through unchanged, bodies streamed both ways. On the local stack it runs as the
storage gate (deploy/local_iam/storage_gate.py), which every client reaches and which also checks each call against
the deploy's IAM policy.

`python -m deploy.local.storage_front --port P --upstream http://HOST:PORT` prints READY_LINE once it listens.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import signal
import sys
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

READY_LINE = "storage front ready"
LAYOUT_PATH = re.compile(r"/storage/v1/b/(?P<bucket>[^/?]+)/storageLayout")
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "host"}
)
"""Headers that describe one connection, not the message: never passed on (RFC 9110, section 7.6.1)."""
CHUNK = 1 << 16
UPSTREAM_TIMEOUT_S = 300.0


def storage_layout(bucket: dict[str, Any]) -> dict[str, Any]:
    """The storageLayout resource Cloud Storage returns for a bucket without a hierarchical namespace
    (https://cloud.google.com/storage/docs/json_api/v1/buckets/getStorageLayout), from the bucket's metadata."""
    return {
        "kind": "storage#storageLayout",
        "bucket": bucket["name"],
        "location": str(bucket.get("location") or "US-CENTRAL1").upper(),
        "locationType": bucket.get("locationType") or "region",
        "hierarchicalNamespace": {"enabled": False},
    }


class Front(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    """TCP_NODELAY: an answer's headers and body go out as two writes, and with Nagle's algorithm the body waited for
    the client's delayed ACK, some 40 ms on every call (bench/storage_gate.py: 47 ms a call, then under 2)."""
    server: FrontServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: gcloud's requests are not worth a log line each."""

    def admitted(self) -> bool:
        """Whether to serve this request; False when it was answered already (the gate's refusal)."""
        return True

    def _serve(self) -> None:
        if not self.admitted():
            return
        match = LAYOUT_PATH.fullmatch(urlsplit(self.path).path)
        if self.command == "GET" and match is not None:
            self._layout(unquote(match["bucket"]))
        else:
            self._forward()

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    def _connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(
            self.server.upstream_host, self.server.upstream_port, timeout=UPSTREAM_TIMEOUT_S
        )

    def _layout(self, bucket: str) -> None:
        conn = self._connection()
        try:
            conn.request("GET", f"/storage/v1/b/{bucket}", headers={"Accept": "application/json"})
            answer = conn.getresponse()
            body = answer.read()
        finally:
            conn.close()
        if answer.status == 200:
            body = json.dumps(storage_layout(json.loads(body))).encode()
        self.send_response(answer.status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _request_body(self) -> bytes | None:
        length = self.headers.get("Content-Length")
        if length is not None:
            return self.rfile.read(int(length))
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        return None

    def _forward(self) -> None:
        body = self._request_body()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        conn = self._connection()
        try:
            conn.request(self.command, self.upstream_path(), body=body, headers=headers)
            answer = conn.getresponse()
            self.relay(answer)
        finally:
            conn.close()

    def upstream_path(self) -> str:
        """The path (and query) this request has at fake-gcs-server."""
        return self.path

    def header_value(self, key: str, value: str) -> str:
        """A header of fake-gcs-server's answer as it is passed on."""
        return value

    def send_answer_head(self, answer: http.client.HTTPResponse) -> None:
        """fake-gcs-server's status and headers, but those of the connection and its length (the caller sends them)."""
        self.send_response(answer.status, answer.reason)
        for key, value in answer.getheaders():
            if key.lower() not in HOP_BY_HOP and key.lower() != "content-length":
                self.send_header(key, self.header_value(key, value))

    def relay(self, answer: http.client.HTTPResponse) -> None:
        """Send fake-gcs-server's answer on, its body streamed."""
        self.send_answer_head(answer)
        length = answer.getheader("Content-Length")
        if self.command == "HEAD" or answer.status in (204, 304):
            self.send_header("Content-Length", length or "0")
            self.end_headers()
            return
        if length is not None:
            self.send_header("Content-Length", length)
            self.end_headers()
            while chunk := answer.read(CHUNK):
                self.wfile.write(chunk)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        while chunk := answer.read1(CHUNK):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.write(b"0\r\n\r\n")


class FrontServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, upstream: str, host: str = "127.0.0.1", handler: type[Front] | None = None) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or parts.hostname is None or parts.port is None:
            raise ValueError(f"--upstream must be http://HOST:PORT (fake-gcs-server), got {upstream!r}")
        self.upstream_host, self.upstream_port = parts.hostname, parts.port
        super().__init__((host, port), handler or Front)


def serve(port: int, upstream: str) -> FrontServer:
    """A started front (serving on a thread); `shutdown()` stops it."""
    server = FrontServer(port, upstream)
    threading.Thread(target=server.serve_forever, name="storage-front", daemon=True).start()
    return server


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.local.storage_front", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="fake-gcs-server's http://HOST:PORT")
    args = parser.parse_args(argv)
    return serve_until_stopped(serve(args.port, args.upstream))


def serve_until_stopped(server: FrontServer) -> int:
    """Say READY_LINE for the server (already serving on its thread), then wait for SIGTERM or SIGINT and stop it."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    print(READY_LINE, flush=True)
    stop.wait()
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
