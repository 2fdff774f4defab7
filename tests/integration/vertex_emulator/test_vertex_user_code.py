"""A team's own code run by the Vertex emulator as Vertex would: the CustomJob the dispatcher builds for a
script (2 nodes x 2 processes), a package and a mapped container image, with the code fetched from the code bucket on
fake-gcs-server, the dataset read through the contract's local folder, and the model and metrics left in the run's
model folder; and a failing script's classified reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from google.cloud.aiplatform_v1 import CustomJob, JobState

from functions.dispatch.dataset_check import check_dataset
from functions.dispatch.job_spec import artifacts, custom_job
from functions.gcp.gcs_objects import GcsObjects
from functions.planning import plan_input_from_request, plan_request
from functions.records.failure_reasons import classify
from functions.settings import Settings, settings_from_env
from schemas.trainer_failure import parse_trainer_failure
from schemas.training_request import TrainingRequest, parse_training_request

from .harness import PARENT, PROJECT, REPO_ROOT, EmulatorProcess

EXAMPLES = REPO_ROOT / "examples"
IMAGE = "us-central1-docker.pkg.dev/landfall-local/landfall/ddp-example:1"


@pytest.fixture()
def world(gcs_emulator: Any, start_emulator: Callable[..., EmulatorProcess]) -> Iterator[dict[str, Any]]:
    """Buckets for data and code on fake-gcs-server, a dataset in one, and an emulator that maps the example image."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(project=PROJECT, credentials=AnonymousCredentials())
    suffix = uuid.uuid4().hex[:8]
    data, code = client.create_bucket(f"landing-{suffix}"), client.create_bucket(f"code-{suffix}")
    rows = "".join(f"{i},{i % 5},{3 * i + 1}\n" for i in range(60))
    data.blob("datasets/lines/part-0.csv").upload_from_string("a,b,y\n" + rows)
    data.blob("datasets/lines/_SUCCESS").upload_from_string("")
    settings = settings_from_env(
        {"GOOGLE_CLOUD_PROJECT": PROJECT, "LANDFALL_LANDING_BUCKET": data.name, "LANDFALL_CODE_BUCKET": code.name}
    )
    vertex = start_emulator("--images", str(EXAMPLES / "container" / "images.json"))
    yield {"data": data, "code": code, "settings": settings, "vertex": vertex}


def run_job(
    world: dict[str, Any], trainer: dict[str, Any], landed_after: Callable[[], None] | None = None, **pins: int | str
) -> tuple[Any, TrainingRequest]:
    settings: Settings = world["settings"]
    request = parse_training_request(
        {
            "idempotency_key": uuid.uuid4().hex,
            "dataset": {"uri": f"gs://{settings.landing_bucket}/datasets/lines/"},
            "trainer": trainer,
            "workload": {"parameters": 3},
            "hyperparameters": {"batch_size": 8},
            "constraints": {"spot": "never", **pins},
        }
    )
    outcome = plan_request(plan_input_from_request(request))
    assert outcome.plan is not None, outcome.rejection
    # What the dispatcher does before CreateCustomJob: check the dataset and write the version's listing.
    assert check_dataset(request, GcsObjects(world["data"].client), settings) is None
    if landed_after is not None:
        landed_after()
    body = custom_job(request, outcome.plan, settings, request.run_id)
    vertex: EmulatorProcess = world["vertex"]
    job = vertex.client.create_custom_job(parent=PARENT, custom_job=CustomJob(body))
    # 13 s alone; minutes on two loaded CPUs, while the other worker runs the e2e stack's own torch jobs
    return vertex.wait_terminal(job.name, timeout=600), request


def upload(world: dict[str, Any], path: Path) -> str:
    blob = world["code"].blob(f"team/{path.name}")
    blob.upload_from_filename(str(path))
    return f"gs://{world['code'].name}/{blob.name}"


def model_folder(world: dict[str, Any], request: TrainingRequest) -> dict[str, bytes]:
    model_dir = artifacts(world["settings"], request.run_id)["model_dir"]
    prefix = model_dir.removeprefix(f"gs://{world['data'].name}/")
    return {b.name[len(prefix) :]: b.download_as_bytes() for b in world["data"].list_blobs(prefix=prefix)}


def assert_trained(world: dict[str, Any], job: Any, request: TrainingRequest, world_size: int, form: str) -> None:
    assert job.state == JobState.JOB_STATE_SUCCEEDED, job.error.message
    files = model_folder(world, request)
    assert len(files["model.pt"]) > 0
    metrics = json.loads(files["metrics.json"])
    assert (metrics["trainer"], metrics["final"]["world_size"], metrics["steps"]) == (form, world_size, 3)
    assert len(metrics["loss_curve"]) == 3


def test_a_torchrun_script_runs_on_two_nodes_of_two_processes(world: dict[str, Any]) -> None:
    trainer = {"script": upload(world, EXAMPLES / "ddp_script" / "train.py"), "args": ["--epochs", "3"]}
    job, request = run_job(world, trainer, machine_type="g2-standard-24", accelerator_count=2, replica_count=2)
    assert_trained(world, job, request, world_size=4, form="script")
    # The plan's checkpoint interval reached the team's code through the contract's environment.
    env = {e.name: e.value for e in job.job_spec.worker_pool_specs[0].container_spec.env}
    every = int(env["LANDFALL_CHECKPOINT_EVERY_STEPS"])
    assert every >= 1
    assert json.loads(model_folder(world, request)["metrics.json"])["final"]["checkpoint_every_steps"] == every


def test_a_folder_of_code_runs_its_entry_point_which_imports_its_sibling(world: dict[str, Any]) -> None:
    """`landfall submit --script DIR`'s archive (examples/ddp_folder: main.py imports tabular.py) as trainer.script."""
    from landfall.code_folder import pack_folder

    packed = pack_folder(EXAMPLES / "ddp_folder")
    blob = world["code"].blob(f"team/{packed.name}")
    blob.upload_from_string(packed.data)
    trainer = {"script": f"gs://{world['code'].name}/{blob.name}", "args": ["--epochs", "3"]}
    job, request = run_job(world, trainer, machine_type="g2-standard-24", accelerator_count=2, replica_count=1)
    assert_trained(world, job, request, world_size=2, form="script")


def test_an_installable_package_runs_its_module(world: dict[str, Any], tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), "."],
        cwd=EXAMPLES / "ddp_package",
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("ddp_example-*.whl")
    trainer = {"package_uris": [upload(world, wheel)], "python_module": "ddp_example.train", "args": ["--epochs", "3"]}
    job, request = run_job(world, trainer, machine_type="g2-standard-24", accelerator_count=2, replica_count=1)
    assert_trained(world, job, request, world_size=2, form="package")


def test_a_mapped_container_image_runs_torchrun_on_each_node_with_the_mount_stood_in_for(world: dict[str, Any]) -> None:
    trainer = {"image_uri": IMAGE, "args": ["--epochs", "3"]}
    part = world["data"].get_blob("datasets/lines/part-0.csv")

    def landed_after() -> None:  # after the dispatcher's check: the next version's, not this run's
        world["data"].blob("datasets/lines/part-1.csv").upload_from_string("a,b,y\n1,2,3\n")

    pins: dict[str, Any] = {"machine_type": "g2-standard-24", "accelerator_count": 2, "replica_count": 2}
    job, request = run_job(world, trainer, landed_after, **pins)
    # Vertex starts the container once per node; its entrypoint starts torchrun there, 2 processes per node
    assert_trained(world, job, request, world_size=4, form="image")
    listing = world["data"].blob(f"runs/{request.run_id}/data-files.jsonl").download_as_text().splitlines()
    assert [json.loads(line) for line in listing] == [
        {"name": "part-0.csv", "generation": str(part.generation), "size": part.size}
    ]


def test_a_script_that_exits_1_fails_as_user_code_with_its_line(world: dict[str, Any]) -> None:
    job, request = run_job(world, {"script": upload(world, EXAMPLES / "failing" / "exit_one.py")})
    assert job.state == JobState.JOB_STATE_FAILED
    failure = parse_trainer_failure(model_folder(world, request)["failure.json"].decode())
    verdict = classify(failure.kind, job.error.message, job.error.code, exit_code=failure.exit_code)
    assert verdict.reason == "user-code" and "loss went to nan" in failure.message


def test_a_b200_plan_runs_the_cuda_13_trainer_image_which_the_emulator_runs_as_the_trainer(
    world: dict[str, Any],
) -> None:
    """A plan on B200 (sm_100) names the trainer image built for CUDA 13 (`trainer-cu130`), and the emulator
    runs that image as Landfall's trainer (its launcher fetches the script), as Vertex would run the container."""
    trainer = {"script": upload(world, EXAMPLES / "ddp_script" / "train.py"), "args": ["--epochs", "3"]}
    pins: dict[str, Any] = {"machine_type": "a4-highgpu-8g", "replica_count": 1, "flex_start": "allowed"}
    job, request = run_job(world, {**trainer, "launch": "per-node"}, **pins)  # A4: not sold on demand
    (pool,) = job.job_spec.worker_pool_specs
    assert pool.machine_spec.accelerator_type.name == "NVIDIA_B200"
    assert pool.container_spec.image_uri.startswith(f"us-central1-docker.pkg.dev/{PROJECT}/landfall/trainer-cu130:")
    assert_trained(world, job, request, world_size=1, form="script")


def test_the_exported_custom_job_of_a_script_runs_as_printed(
    world: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`landfall plan --custom-job --format json` for a team's script, submitted as docs/custom-job.md shows (the
    stock JobServiceClient, the body parsed into aiplatform_v1.CustomJob) with no dispatcher in between: the
    listing its LANDFALL_DATA_FILES names was written by the export, and the job trains to SUCCEEDED."""
    import grpc
    from google.cloud import aiplatform_v1
    from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport
    from google.protobuf import json_format

    from functions import wiring
    from functions.settings import get_settings
    from landfall.cli import main

    settings: Settings = world["settings"]
    for name in [n for n in os.environ if n.startswith("LANDFALL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("LANDFALL_LANDING_BUCKET", settings.landing_bucket)
    monkeypatch.setenv("LANDFALL_CODE_BUCKET", settings.code_bucket)
    get_settings.cache_clear()
    wiring.gcs_objects.cache_clear()
    request = tmp_path / "request.json"
    request.write_text(
        json.dumps(
            {
                "idempotency_key": uuid.uuid4().hex,
                "dataset": {"uri": f"gs://{settings.landing_bucket}/datasets/lines/"},
                "trainer": {"script": upload(world, EXAMPLES / "ddp_script" / "train.py"), "args": ["--epochs", "3"]},
                "workload": {"parameters": 3},
                "hyperparameters": {"batch_size": 8},
                "constraints": {
                    "spot": "never",
                    "regions": ["us-central1"],
                    "machine_type": "g2-standard-24",
                    "accelerator_count": 2,
                    "replica_count": 1,
                },
            }
        )
    )
    try:
        assert main(["plan", str(request), "--custom-job", "--format", "json", "--measured", "off"]) == 0
    finally:
        get_settings.cache_clear()
        wiring.gcs_objects.cache_clear()
    printed = capsys.readouterr()
    assert "wrote the dataset listing" in printed.err
    job_file = tmp_path / "job.json"
    job_file.write_text(printed.out)

    # As a user would: the stock client at the emulator's endpoint, the printed file read as the SDK snippet reads it.
    client = aiplatform_v1.JobServiceClient(
        transport=JobServiceGrpcTransport(channel=grpc.insecure_channel(world["vertex"].address))
    )
    job = aiplatform_v1.CustomJob.wrap(
        json_format.ParseDict(json.loads(job_file.read_text()), aiplatform_v1.CustomJob.pb()())
    )
    created = client.create_custom_job(parent=PARENT, custom_job=job)
    ended = world["vertex"].wait_terminal(created.name, timeout=300)
    assert ended.state == JobState.JOB_STATE_SUCCEEDED, ended.error.message
    assert_trained(world, ended, parse_training_request(request.read_text()), world_size=2, form="script")
