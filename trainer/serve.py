"""`python -m trainer.serve`: serve a built-in trainer model over HTTP, as a Vertex AI custom serving container.

Vertex AI's contract ("Custom container requirements for prediction", docs/models.md cites it): listen on 0.0.0.0 at
AIP_HTTP_PORT (the first of the Model's containerSpec.ports, 8080 by default); answer GET AIP_HEALTH_ROUTE with 200
once ready to predict and another status before; answer POST AIP_PREDICT_ROUTE {"instances": [...], "parameters":
{...}} with {"predictions": [...]}; read the model from AIP_STORAGE_URI (the gs:// folder where Vertex copied the
Model's artifactUri). The registration names this command, routes and port (schemas/serving.py).

The model is loaded once, in the background, so the port accepts connections (Vertex's liveness probe) at once and
health says 503 until the model is in memory. A model that cannot be loaded stops the server with the reason logged
and exit status 1: Vertex restarts the container and the deployment shows the log, instead of a server that is
never healthy. Answers: 200, 400 (a request that does not fit the model, with what was expected), 404 (another
path), 413 (over 1.5 MB), 503 (not loaded yet), 500 (the model failed).

Outside Vertex, AIP_STORAGE_URI may be a local folder, and the routes default to schemas/serving.py's:

    AIP_STORAGE_URI=gs://bucket/runs/RUN/model AIP_HTTP_PORT=8080 python -m trainer.serve
"""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from schemas.serving import HEALTH_ROUTE, PREDICT_ROUTE, SERVE_PORT
from trainer.logs import log
from trainer.model_io import LoadedModel, load_model
from trainer.prediction import MAX_REQUEST_BYTES, BadRequest, predict_body

DISCARD_LIMIT = 64 << 20
"""An oversized body up to this size is read and dropped before the 413; a larger one closes the connection."""


@dataclass(frozen=True)
class ServeSettings:
    """What Vertex tells the container (AIP_* variables)."""

    storage_uri: str
    """AIP_STORAGE_URI: the model folder (gs://, /gcs/ or local) holding model.pt and config.json."""
    port: int = SERVE_PORT
    """AIP_HTTP_PORT."""
    health_route: str = HEALTH_ROUTE
    """AIP_HEALTH_ROUTE."""
    predict_route: str = PREDICT_ROUTE
    """AIP_PREDICT_ROUTE."""

    @classmethod
    def from_env(cls, env: dict[str, str]) -> ServeSettings:
        uri = env.get("AIP_STORAGE_URI", "").strip()
        if not uri:
            raise ValueError(
                "AIP_STORAGE_URI is not set: expected the model folder (gs://BUCKET/.../model or a local path) "
                "holding model.pt and config.json; Vertex AI sets it from the Model's artifactUri"
            )
        port = env.get("AIP_HTTP_PORT", "") or str(SERVE_PORT)
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"AIP_HTTP_PORT is {port!r}: expected a port number")
        return cls(
            storage_uri=uri,
            port=int(port),
            health_route=env.get("AIP_HEALTH_ROUTE") or HEALTH_ROUTE,
            predict_route=env.get("AIP_PREDICT_ROUTE") or PREDICT_ROUTE,
        )


class ModelHolder:
    """The model once loaded; None before."""

    def __init__(self) -> None:
        self._model: LoadedModel | None = None
        self._lock = threading.Lock()

    def set(self, model: LoadedModel) -> None:
        with self._lock:
            self._model = model

    def get(self) -> LoadedModel | None:
        with self._lock:
            return self._model


def handler_for(settings: ServeSettings, holder: ModelHolder) -> type[BaseHTTPRequestHandler]:
    """The request handler class bound to the settings and the model holder."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path != settings.health_route:
                self._answer(404, {"error": f"no route {path}: GET {settings.health_route} is the health check"})
            elif holder.get() is None:
                self._answer(503, {"status": "loading", "model": settings.storage_uri})
            else:
                self._answer(200, {"status": "ready"})

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            if path != settings.predict_route:
                self._answer(404, {"error": f"no route {path}: POST {settings.predict_route} predicts"})
                return
            length = self.headers.get("Content-Length", "")
            if not length.isdigit():
                self._answer(411, {"error": "expected a Content-Length header with the JSON body's size"})
                return
            if int(length) > MAX_REQUEST_BYTES:
                self._discard(int(length))
                self._answer(413, {"error": f"the request is {length} bytes; at most {MAX_REQUEST_BYTES}"})
                return
            body = self.rfile.read(int(length))
            model = holder.get()
            if model is None:
                self._answer(503, {"error": "the model is still loading: retry when the health check says ready"})
                return
            try:
                self._answer(200, predict_body(model, body))
            except BadRequest as exc:
                self._answer(400, {"error": str(exc)})
            except Exception as exc:  # a model failure answers 500 with its reason; the server keeps serving
                log("prediction failed", severity="ERROR", error=repr(exc))
                self._answer(500, {"error": f"the model failed: {exc!r}"})

        def _discard(self, length: int) -> None:
            """Read an oversized body away (so the caller, still sending, gets the 413), or hang up on a huge one."""
            if length > DISCARD_LIMIT:
                self.close_connection = True
                return
            while length > 0:
                chunk = self.rfile.read(min(length, 1 << 16))
                if not chunk:  # the caller hung up
                    break
                length -= len(chunk)

        def _answer(self, status: int, doc: dict[str, Any]) -> None:
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            """Health checks come often: only 4xx and 5xx answers are logged (JSON lines, trainer/logs.py)."""
            if str(code).startswith(("4", "5")):
                log("request", severity="WARNING", request=self.requestline, status=str(code))

        def log_message(self, format: str, *args: Any) -> None:
            log(format % args, severity="WARNING")

    return Handler


def serve(settings: ServeSettings) -> int:
    """Listen, load the model in the background, serve until stopped; 1 when the model cannot be loaded."""
    holder = ModelHolder()
    server = ThreadingHTTPServer(("0.0.0.0", settings.port), handler_for(settings, holder))
    failed: list[str] = []

    def load() -> None:
        try:
            model = load_model(settings.storage_uri)
        except Exception as exc:  # any load failure ends the server with its reason (see the module docstring)
            failed.append(repr(exc))
            log("cannot load the model", severity="ERROR", model=settings.storage_uri, error=repr(exc))
            server.shutdown()
            return
        holder.set(model)
        log("model loaded", model=settings.storage_uri, task=model.task)

    log(
        "serving",
        port=settings.port,
        health_route=settings.health_route,
        predict_route=settings.predict_route,
        model=settings.storage_uri,
    )
    threading.Thread(target=load, name="load-model", daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 1 if failed else 0


def main() -> int:
    try:
        settings = ServeSettings.from_env(dict(os.environ))
    except ValueError as exc:
        log(str(exc), severity="ERROR")
        return 2
    return serve(settings)


if __name__ == "__main__":
    sys.exit(main())
