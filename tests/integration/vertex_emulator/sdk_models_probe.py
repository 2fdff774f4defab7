"""The high-level SDK (`aiplatform.Model`) against the emulator's TLS port, run in its own process.

`python -m tests.integration.vertex_emulator.sdk_models_probe HOST:PORT PROJECT LOCATION MODEL_ID` with
GRPC_DEFAULT_SSL_ROOTS_FILE_PATH naming the emulator's certificate (gRPC reads it once, when it first needs roots,
hence a process of its own). Uploads two versions, moves an alias, reads back by alias and lists with a label filter;
prints what it saw as one JSON line.
"""

from __future__ import annotations

import json
import sys

from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform

SERVING_IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/pytorch-cpu.2-4:latest"


def main(endpoint: str, project: str, location: str, model_id: str) -> dict[str, object]:
    aiplatform.init(project=project, location=location, api_endpoint=endpoint, credentials=AnonymousCredentials())
    common = {"serving_container_image_uri": SERVING_IMAGE, "sync": True}
    first = aiplatform.Model.upload(
        display_name="sdk-route",
        artifact_uri="gs://landfall-local/runs/sdk1/model",
        model_id=model_id,
        labels={"team": model_id, "run_id": "sdk1"},
        **common,
    )
    second = aiplatform.Model.upload(
        display_name="sdk-route",
        artifact_uri="gs://landfall-local/runs/sdk2/model",
        parent_model=first.resource_name,
        labels={"team": model_id, "run_id": "sdk2"},
        version_aliases=["candidate"],
        is_default_version=False,
        **common,
    )
    registry = aiplatform.models.ModelRegistry(model_id)
    registry.add_version_aliases(["production"], version=second.version_id)
    production = aiplatform.Model(model_name=model_id, version="production")
    listed = aiplatform.Model.list(filter=f'labels.team="{model_id}"')
    return {
        "first": [first.resource_name, first.version_id, list(first.version_aliases)],
        "second": [second.resource_name, second.version_id, sorted(second.version_aliases)],
        "versions": [v.version_id for v in registry.list_versions()],
        "production": [production.version_id, production.labels["run_id"], production.uri],
        "listed": [[m.resource_name, m.version_id] for m in listed],
    }


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:5])), flush=True)
