"""The serving container registered with the built-in trainer's models (docs/models.md, "Serving").

Landfall's trainer image serves what the built-in trainer saved: `python -m trainer.serve` (trainer/serve.py) is an
HTTP server that meets Vertex AI's custom container contract ("Custom container requirements for prediction":
Vertex starts the command, sends liveness and health checks and prediction requests to the first of the spec's
ports, and tells the container its port, routes and the model's folder through AIP_HTTP_PORT, AIP_HEALTH_ROUTE,
AIP_PREDICT_ROUTE and AIP_STORAGE_URI). One place for the command, routes and port, read by the registration
(functions/records/model_registration.py) and by the server.
"""

from __future__ import annotations

from typing import Any

SERVE_COMMAND = ("python", "-m", "trainer.serve")
"""ModelContainerSpec.command: overrides the trainer image's entrypoint (which trains)."""
HEALTH_ROUTE = "/health"
"""ModelContainerSpec.health_route: GET answers 200 once the model is loaded, 503 before."""
PREDICT_ROUTE = "/predict"
"""ModelContainerSpec.predict_route: POST {"instances": [...], "parameters": {...}} -> {"predictions": [...]}."""
SERVE_PORT = 8080
"""ModelContainerSpec.ports[0].container_port (Vertex's default port as well)."""


def builtin_container_spec(image_uri: str) -> dict[str, Any]:
    """The Model.container_spec (google.cloud.aiplatform.v1.ModelContainerSpec, as a dict) that serves a built-in
    trainer model from Landfall's trainer image."""
    return {
        "image_uri": image_uri,
        "command": list(SERVE_COMMAND),
        "health_route": HEALTH_ROUTE,
        "predict_route": PREDICT_ROUTE,
        "ports": [{"container_port": SERVE_PORT}],
    }
