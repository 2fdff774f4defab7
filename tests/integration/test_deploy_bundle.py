"""The staged dispatch bundle, installed into a fresh virtual environment from its own requirements.txt alone, is
served by functions-framework the way Cloud Run functions serves it (main.py at the bundle root), with the
environment `landfall deploy` gives it, and handles a Pub/Sub push of the golden TrainingRequest against the
Firestore emulator and the Vertex emulator: the run document appears and the job runs the deployed trainer image
through container_spec.

The virtual environment is cached under .landfall/cache/ (tests/isolated_venv.py), so only the first run pays for
the install.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from deploy.gcp.bundles import REPO_ROOT, stage_function
from deploy.gcp.plan import Target, function_env, names
from deploy.local.processes import free_port
from schemas.training_request import parse_training_request
from tests.conftest import Emulator
from tests.integration.vertex_emulator.harness import EmulatorProcess, launch_emulator
from tests.isolated_venv import requirements_venv, stop, wait_answering
from tests.polling import wait_for

TARGET = Target(project="landfall-local", region="us-central1")
IMAGE = "us-central1-docker.pkg.dev/landfall-local/landfall/trainer:0123456789abcdef"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    env = function_env(names(TARGET), IMAGE)
    staged = stage_function("dispatch", env, out=tmp_path_factory.mktemp("stage"))
    return staged.source, env


@pytest.fixture(scope="module")
def vertex(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    folder = tmp_path_factory.mktemp("vertex")
    process = launch_emulator(folder / "state", folder / "emulator.log")  # no --images: the trainer image is known
    yield process
    process.stop()


@pytest.fixture(scope="module")
def served(
    bundle: tuple[Path, dict[str, str]],
    firestore_emulator: Emulator,
    gcs_emulator: Emulator,
    vertex: EmulatorProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """functions-framework from the bundle's own venv, in the bundle folder, with nothing of the repository on its
    path: only the deployed environment plus the emulator hosts."""
    source, env = bundle
    venv = requirements_venv([source / "requirements.txt"], name="bundle", compile_bytecode=True)
    port = free_port()
    process_env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/tmp"),
        **env,
        "FIRESTORE_EMULATOR_HOST": firestore_emulator.host,
        "STORAGE_EMULATOR_HOST": f"http://{gcs_emulator.host}",  # the dispatcher lists the dataset before it plans
        "LANDFALL_VERTEX_ENDPOINT": vertex.address,
        "PYTHONUNBUFFERED": "1",
    }
    where = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import functions, functions_framework; print(functions.__file__); print(functions_framework.__file__)",
        ],
        cwd=source,
        env=process_env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert Path(where[0]).is_relative_to(source) and Path(where[1]).is_relative_to(venv), where
    log = tmp_path_factory.mktemp("function") / "dispatch.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                str(venv / "bin" / "functions-framework"),
                "--target",
                "dispatch",
                "--signature-type",
                "cloudevent",
                "--source",
                "main.py",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            cwd=source,
            env=process_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_answering(process, url, log, 60, "the bundle's functions-framework")
        yield url
    finally:
        stop(process)


def golden_request(landing_bucket: str) -> dict[str, Any]:
    """schemas/examples/training_request.json, its dataset moved into the deployed landing bucket."""
    raw = json.loads((REPO_ROOT / "schemas" / "examples" / "training_request.json").read_text())
    request = parse_training_request(json.dumps(raw).encode())
    prefix = "datasets/bundle-test/"
    moved = replace(
        request,
        idempotency_key=f"gcs:{landing_bucket}/{prefix}:{os.getpid()}",
        dataset=replace(request.dataset, uri=f"gs://{landing_bucket}/{prefix}"),
    )
    return moved.to_dict()


def land_dataset(request: dict[str, Any]) -> None:
    """The request's dataset in the landing bucket (fake-gcs-server): a CSV shard with the request's label column,
    which the dispatcher checks before it plans."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from tests import datagen

    bucket_name, prefix = request["dataset"]["uri"].removeprefix("gs://").split("/", 1)
    client = storage.Client(project=TARGET.project, credentials=AnonymousCredentials())
    bucket = client.lookup_bucket(bucket_name) or client.create_bucket(bucket_name)
    label = request["model"].get("label_column", "label")
    bucket.blob(f"{prefix}part-0.csv").upload_from_string(datagen.csv_text(datagen.separable_rows(64, 0), label))


def push(url: str, data: bytes, subscription: str) -> int:
    """POST a message as a Pub/Sub push subscription does (the wrapped JSON body)."""
    body = {
        "message": {
            "data": base64.b64encode(data).decode(),
            "attributes": {},
            "messageId": "4242",
            "publishTime": "2026-11-22T12:00:00.000Z",
        },
        "subscription": subscription,
    }
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            status: int = answer.status
            return status
    except urllib.error.HTTPError as refused:
        return refused.code


def test_the_staged_dispatch_bundle_records_the_run_and_submits_the_deployed_image(
    served: str, bundle: tuple[Path, dict[str, str]], firestore_emulator: Emulator, vertex: EmulatorProcess
) -> None:
    from google.cloud import firestore

    from schemas.training_request import run_id_for

    _, env = bundle
    request = golden_request(env["LANDFALL_LANDING_BUCKET"])
    land_dataset(request)
    status = push(
        served,
        json.dumps(request).encode(),
        f"projects/{TARGET.project}/subscriptions/landfall-training-requests-dispatch",
    )
    assert status == 200
    runs = firestore.Client(project=TARGET.project).collection("runs")
    run_id = run_id_for(request["idempotency_key"])
    doc = wait_for(
        lambda: (snap := runs.document(run_id).get()).exists and snap.to_dict(), 30, f"run {run_id} to appear"
    )
    assert doc["state"] in ("SUBMITTED", "RUNNING", "SUCCEEDED", "FAILED"), doc
    assert doc["vertex"]["job_name"], doc
    job = vertex.client.get_custom_job(name=doc["vertex"]["job_name"])
    pool = job.job_spec.worker_pool_specs[0]
    assert pool.container_spec.image_uri == IMAGE
    assert not pool.python_package_spec.python_module
    assert job.job_spec.service_account == env["LANDFALL_TRAINING_SERVICE_ACCOUNT"]
    artifacts = env["LANDFALL_OUTPUT_BUCKET"]
    assert job.job_spec.base_output_directory.output_uri_prefix == f"gs://{artifacts}/runs/{run_id}/"
    assert doc["artifacts"]["model_dir"] == f"gs://{artifacts}/runs/{run_id}/model/"
    # A redelivery of the same push is a no-op: same run, no second job.
    assert push(served, json.dumps(request).encode(), "s") == 200
    again = runs.document(run_id).get().to_dict()
    assert again is not None and again["vertex"]["job_name"] == doc["vertex"]["job_name"]
