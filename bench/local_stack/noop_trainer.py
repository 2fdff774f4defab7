"""A trainer that trains nothing: the load test maps the trainer image to it (the Vertex emulator's --images), so a
machine can run hundreds of jobs. It writes what the completion listener reads for a SUCCEEDED run, metrics.json in
AIP_MODEL_DIR, and exits 0. Standard library only: it starts in tens of milliseconds. LANDFALL_NOOP_SECONDS (default 0)
makes it wait that long first, so that each job holds its GPUs a while (the load test's team GPU caps then bind).

    python -m bench.local_stack.noop_trainer [trainer flags, ignored]
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.parse
import urllib.request

METRICS = {"noop": True, "epochs_completed": 0}
"""What the no-op reports; the listener stores any JSON object as the run's metrics."""
SECONDS_ENV = "LANDFALL_NOOP_SECONDS"


def upload_url(storage_host: str, gcs_uri: str) -> str:
    """The JSON API media-upload URL writing gcs_uri (gs://bucket/name) on the storage endpoint storage_host."""
    if not gcs_uri.startswith("gs://") or "/" not in gcs_uri[5:]:
        raise ValueError(f"expected gs://BUCKET/NAME, got {gcs_uri!r}")
    bucket, _, name = gcs_uri[5:].partition("/")
    query = urllib.parse.urlencode({"uploadType": "media", "name": name})
    return f"{storage_host.rstrip('/')}/upload/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o?{query}"


def main() -> int:
    model_dir, storage = os.environ.get("AIP_MODEL_DIR", ""), os.environ.get("STORAGE_EMULATOR_HOST", "")
    if not model_dir or not storage:
        print(
            "noop trainer: AIP_MODEL_DIR and STORAGE_EMULATOR_HOST must be set (the Vertex emulator on the local "
            "stack sets both)",
            file=sys.stderr,
        )
        return 2
    time.sleep(float(os.environ.get(SECONDS_ENV) or 0))
    request = urllib.request.Request(
        upload_url(storage, f"{model_dir.rstrip('/')}/metrics.json"),
        data=json.dumps(METRICS).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()
    return 0


if __name__ == "__main__":
    sys.exit(main())
