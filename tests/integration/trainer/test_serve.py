"""`python -m trainer.serve` as Vertex AI runs the registered container: AIP_* variables, a model folder the trainer
wrote (local, and gs:// on fake-gcs-server as Vertex hands it over), health 200 once loaded, predictions equal to
load_model(folder).predict(rows), and the 4xx answers a caller sees."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from deploy.local.processes import free_port
from tests.model_folders import FEATURES, tabular_config, write_model_dir
from tests.polling import wait_for
from tests.trainer_runner import REPO, trainer_env
from trainer.model_io import load_model, save_model
from trainer.prediction import MAX_REQUEST_BYTES

ROWS = [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3], [5.9, 3.0, 4.2, 1.5], [4.9, 2.4, 3.3, 1.0]]
PREDICT = "/v1/endpoints/123/deployedModels/456:predict"  # the route Vertex passes when the spec names none


def call(url: str, doc: Any = None, raw: bytes | None = None) -> tuple[int, dict[str, Any]]:
    data = raw if raw is not None else (None if doc is None else json.dumps(doc).encode())
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def health(base: str) -> int | None:
    try:
        return call(base + "/health")[0]
    except (urllib.error.URLError, ConnectionError):
        return None  # not listening yet


class Server:
    def __init__(self, storage_uri: str, **env: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        variables = trainer_env(
            AIP_STORAGE_URI=storage_uri,
            AIP_HTTP_PORT=str(self.port),
            AIP_HEALTH_ROUTE="/health",
            AIP_PREDICT_ROUTE=PREDICT,
            **env,
        )
        self.process = subprocess.Popen(
            [sys.executable, "-m", "trainer.serve"],
            cwd=REPO,
            env=variables,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def ready(self) -> None:
        def up() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"trainer.serve exited {self.process.returncode}: {self.process.stdout}")
            return health(self.base) == 200

        wait_for(up, timeout=60, what="trainer.serve's health check to answer 200")

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.terminate()
        out, _ = self.process.communicate(timeout=30)
        return out


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    folder = write_model_dir(tmp_path / "model", tabular_config(), seed=3)
    server = Server(str(folder))
    try:
        server.ready()
        yield server, folder
    finally:
        server.stop()


def test_serves_the_trainers_model_as_load_model_predicts_it_and_refuses_bad_requests(served) -> None:
    server, folder = served
    expected = load_model(str(folder)).predict(ROWS)
    status, answer = call(server.base + PREDICT, {"instances": ROWS})
    assert status == 200 and answer == {"predictions": expected}
    named = [dict(zip(FEATURES, row, strict=True)) for row in ROWS]
    assert call(server.base + PREDICT, {"instances": named, "parameters": {}}) == (200, answer)

    status, answer = call(server.base + PREDICT, {"instances": [[1.0, 2.0]]})
    assert status == 400 and "instances[0]: 2 values: expected 4 numbers in the order" in answer["error"], answer
    status, answer = call(server.base + PREDICT, raw=b"{not json")
    assert status == 400 and "expected a JSON object" in answer["error"]
    status, answer = call(server.base + "/predict", {"instances": ROWS})
    assert status == 404 and PREDICT in answer["error"]
    status, answer = call(server.base + PREDICT, raw=b"[" * (MAX_REQUEST_BYTES + 1))
    assert status == 413 and str(MAX_REQUEST_BYTES) in answer["error"]
    assert call(server.base + "/health")[0] == 200  # still serving after each refusal


def test_loads_a_gs_model_folder_as_vertex_hands_it_over(gcs_emulator, tmp_path: Path) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    bucket = storage.Client(project="landfall-local", credentials=AnonymousCredentials()).create_bucket(
        f"serve-{uuid.uuid4().hex[:10]}"
    )
    uri = f"gs://{bucket.name}/runs/r1/model"
    config = tabular_config("tabular-regression")
    local = write_model_dir(tmp_path / "model", config, seed=5)
    save_model(uri, load_model(str(local)).module.state_dict(), config)
    server = Server(uri)
    try:
        server.ready()
        expected = load_model(uri).predict(ROWS)
        assert isinstance(expected, torch.Tensor)
        status, answer = call(server.base + PREDICT, {"instances": ROWS})
        assert status == 200 and answer["predictions"] == pytest.approx(expected.tolist())
    finally:
        server.stop()


def test_a_model_that_cannot_be_loaded_stops_the_server_with_the_reason(tmp_path: Path) -> None:
    server = Server(str(tmp_path / "no-model"))
    try:
        assert server.process.wait(timeout=60) == 1
    finally:
        out = server.stop()
    assert "cannot load the model" in out and "no-model" in out
