"""The campaign's trainer: the Vertex emulator runs it for the campaign's image (LANDFALL_VERTEX_IMAGES), so a trial
takes seconds. It ignores the trainer's flags, waits LANDFALL_CAMPAIGN_TRAIN_SECONDS (so a trainer kill or a spot
preemption can land while it runs) and writes a metrics.json into AIP_MODEL_DIR, as the trainer does. Standard
library only: a replica starts in a fraction of a second."""

from __future__ import annotations

import json
import os
import time
import urllib.parse
import urllib.request


def upload(uri: str, body: bytes) -> None:
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    host = os.environ["STORAGE_EMULATOR_HOST"].rstrip("/")
    url = (
        f"{host}/upload/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o?uploadType=media&"
        f"name={urllib.parse.quote(name, safe='')}"
    )
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()


def main() -> int:
    time.sleep(float(os.environ.get("LANDFALL_CAMPAIGN_TRAIN_SECONDS", "1")))
    metrics = {"final": {"loss": 0.5, "accuracy": 0.75}, "epochs": [], "trainer": "campaign no-op"}
    upload(os.environ["AIP_MODEL_DIR"].rstrip("/") + "/metrics.json", json.dumps(metrics).encode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
