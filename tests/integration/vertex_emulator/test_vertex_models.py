"""ModelService (Model Registry) through a stock `aiplatform_v1.ModelServiceClient` on an insecure channel:
versions with parent_model, aliases moved with MergeVersionAliases, label filters, Vertex's errors, restarts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.api_core.exceptions import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted
from google.cloud import aiplatform_v1
from google.cloud.aiplatform_v1.services.model_service.transports import ModelServiceGrpcTransport
from google.protobuf import struct_pb2

from deploy.vertex_emulator import control

from .harness import PROJECT, REPO_ROOT, EmulatorProcess, launch_emulator

ModelClient = aiplatform_v1.ModelServiceClient
PARENT = f"projects/{PROJECT}/locations/europe-west1"
SAN = "subjectAltName=DNS:localhost,IP:127.0.0.1"
SERVING_IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/pytorch-cpu.2-4:latest"


def model_client(address: str) -> aiplatform_v1.ModelServiceClient:
    """A stock ModelServiceClient on an insecure channel to the emulator, as the JobService tests connect."""
    return aiplatform_v1.ModelServiceClient(transport=ModelServiceGrpcTransport(channel=grpc.insecure_channel(address)))


def _certificate(folder: Path) -> tuple[Path, Path] | None:
    """A self-signed certificate for 127.0.0.1 and localhost (cert, key), or None without the openssl command."""
    if shutil.which("openssl") is None:
        return None
    cert, key = folder / "cert.pem", folder / "key.pem"
    names = ("-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", *names, "-addext", SAN],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmulatorProcess, ModelClient]]:
    """One emulator for this module (no events topic: models publish nothing), also serving TLS when it can."""
    folder = tmp_path_factory.mktemp("models")
    tls = _certificate(folder)
    args = ["--tls-cert", str(tls[0]), "--tls-key", str(tls[1])] if tls else []
    process = launch_emulator(folder / "state", folder / "emulator.log", args)
    yield process, model_client(process.address)
    process.stop()


def _model(run: str, team: str = "vision", **extra: object) -> dict:
    metadata = struct_pb2.Value()
    metadata.struct_value.update({"val_loss": 0.25, "run_id": run})
    return {
        "display_name": f"route-{team}",
        "description": f"trained by {run}",
        "labels": {"run_id": run, "team": team},
        "artifact_uri": f"gs://landfall-local/runs/{run}/model",
        "container_spec": {"image_uri": SERVING_IMAGE, "env": [{"name": "RUN", "value": run}]},
        "metadata": metadata,
        **extra,
    }


def _upload(client: aiplatform_v1.ModelServiceClient, run: str, **request: object) -> aiplatform_v1.UploadModelResponse:
    operation = client.upload_model(request={"parent": PARENT, "model": _model(run), **request})
    response: aiplatform_v1.UploadModelResponse = operation.result(timeout=30)
    return response


def test_three_versions_aliases_and_reads(registry):
    _, client = registry
    model_id = f"route-{uuid.uuid4().hex[:8]}"
    first = _upload(client, "r1", model_id=model_id)
    name = f"{PARENT}/models/{model_id}"
    assert (first.model, first.model_version_id) == (name, "1")
    second = _upload(client, "r2", parent_model=name)
    third = _upload(client, "r3", parent_model=name)
    assert (second.model, second.model_version_id, third.model_version_id) == (name, "2", "3")

    versions = list(client.list_model_versions(name=name))
    assert [v.version_id for v in versions] == ["1", "2", "3"]
    assert {v.name for v in versions} == {name}
    assert [list(v.version_aliases) for v in versions] == [["default"], [], []]
    assert [v.labels["run_id"] for v in versions] == ["r1", "r2", "r3"]
    one = versions[0]
    assert one.artifact_uri == "gs://landfall-local/runs/r1/model"
    assert one.container_spec.image_uri == SERVING_IMAGE and one.container_spec.env[0].value == "r1"
    assert one.description == "trained by r1" and one.metadata["val_loss"] == 0.25
    assert one.version_create_time and one.version_update_time and one.create_time
    assert versions[2].create_time == one.create_time, "create_time is the model's, version_create_time the version's"
    assert versions[2].version_create_time > one.version_create_time

    client.merge_version_aliases(name=f"{name}@1", version_aliases=["production"])
    moved = client.merge_version_aliases(name=f"{name}@3", version_aliases=["production", "candidate"])
    assert sorted(moved.version_aliases) == ["candidate", "production"]
    assert client.get_model(name=f"{name}@1").version_aliases == ["default"], "the alias moved off version 1"
    assert client.get_model(name=f"{name}@production").version_id == "3"
    assert client.get_model(name=f"{name}@2").labels["run_id"] == "r2"
    assert client.get_model(name=name).version_id == "1", "a name without @ is the default version"

    client.merge_version_aliases(name=f"{name}@3", version_aliases=["-candidate", "default"])
    assert sorted(client.get_model(name=name).version_aliases) == ["default", "production"]
    assert client.get_model(name=f"{name}@1").version_aliases == []
    with pytest.raises(NotFound, match="candidate"):
        client.get_model(name=f"{name}@candidate")


def test_upload_operation_is_readable_with_get_operation(registry):
    _, client = registry
    operation = client.upload_model(request={"parent": PARENT, "model": _model("op")})
    response = operation.result(timeout=30)
    assert response.model.startswith(f"{PARENT}/models/") and response.model_version_id == "1"
    assert response.model.rsplit("/", 1)[-1].isdigit(), "without model_id the id is numeric, as Vertex makes it"
    read = client.get_operation(request={"name": operation.operation.name})
    assert read.done and read.name.startswith(f"{response.model}/operations/")
    unpacked = aiplatform_v1.UploadModelResponse.deserialize(read.response.value)
    assert unpacked.model_version_id == "1"
    assert operation.metadata.generic_metadata.create_time
    with pytest.raises(NotFound, match="does not exist"):
        client.get_operation(request={"name": f"{response.model}/operations/999999999"})


def test_list_models_filters_and_answers_default_versions(registry):
    _, client = registry
    batch = uuid.uuid4().hex[:6]
    names = {}
    for key, team in (("a", "vision"), ("b", "speech"), ("c", "vision")):
        labels = {"batch": batch, "team": team, "run_id": f"{batch}{key}"}
        model = _model(f"{batch}{key}", team, labels=labels)
        request = {"parent": PARENT, "model_id": f"m-{batch}-{key}", "model": model}
        names[key] = client.upload_model(request=request).result(timeout=30).model
    second = _model(f"{batch}c2", "vision", labels={"batch": batch, "team": "vision", "run_id": f"{batch}c2"})
    client.upload_model(request={"parent": PARENT, "parent_model": names["c"], "model": second}).result(timeout=30)

    def found(text: str) -> set[str]:
        listed = client.list_models(request={"parent": PARENT, "filter": f'labels.batch="{batch}" AND ({text})'})
        return {key for key, name in names.items() if name in {m.name for m in listed}}

    assert found('labels.team="vision"') == {"a", "c"}
    assert found('labels.team!="vision"') == {"b"}
    assert found("labels.team:*") == {"a", "b", "c"}
    assert found(f'model="m-{batch}-b"') == {"b"}
    assert found('displayName="route-speech"') == {"b"}
    assert found(f'labels.run_id="{batch}c2"') == set(), "ListModels answers each model's default version"
    listed = list(client.list_models(request={"parent": PARENT, "filter": f"labels.batch={batch}", "page_size": 2}))
    assert len(listed) == 3 and all(m.version_aliases == ["default"] for m in listed)
    only_second = client.list_model_versions(request={"name": names["c"], "filter": f'labels.run_id="{batch}c2"'})
    assert [v.version_id for v in only_second] == ["2"]
    with pytest.raises(InvalidArgument, match="Unsupported filter field"):
        client.list_models(request={"parent": PARENT, "filter": 'state="JOB_STATE_FAILED"'})
    with pytest.raises(InvalidArgument, match=r"Supported: labels\.KEY"):
        client.list_model_versions(request={"name": names["c"], "filter": 'display_name="x"'})


def test_vertex_errors_say_what_to_do(registry):
    _, client = registry
    model_id = f"err-{uuid.uuid4().hex[:8]}"
    name = _upload(client, "e1", model_id=model_id).model
    _upload(client, "e2", parent_model=name)
    _upload(client, "e3", parent_model=name)

    with pytest.raises(AlreadyExists, match="parent_model"):
        _upload(client, "again", model_id=model_id)
    with pytest.raises(InvalidArgument, match="model_id"):
        _upload(client, "bad", model_id="9starts-with-a-digit")
    with pytest.raises(NotFound, match="UploadModel"):
        _upload(client, "orphan", parent_model=f"{PARENT}/models/no-such-model")
    with pytest.raises(InvalidArgument, match="display name"):
        client.upload_model(request={"parent": PARENT, "model": {"artifact_uri": "gs://b/m"}})
    with pytest.raises(InvalidArgument, match="gs://"):
        client.upload_model(request={"parent": PARENT, "model": _model("x", artifact_uri="/tmp/model")})
    with pytest.raises(NotFound, match="no version 9"):
        client.get_model(name=f"{name}@9")
    with pytest.raises(NotFound, match="does not exist"):
        client.get_model(name=f"{PARENT}/models/missing")
    with pytest.raises(InvalidArgument, match="Invalid Model name"):
        client.get_model(name="models/x")
    with pytest.raises(InvalidArgument, match='"default" alias cannot be removed'):
        client.merge_version_aliases(name=f"{name}@1", version_aliases=["-default"])
    with pytest.raises(InvalidArgument, match="Invalid version alias"):
        client.merge_version_aliases(name=f"{name}@2", version_aliases=["7"])
    with pytest.raises(InvalidArgument, match="acts on one version"):
        client.merge_version_aliases(name=name, version_aliases=["production"])
    with pytest.raises(InvalidArgument, match="version_aliases is empty"):
        client.merge_version_aliases(name=f"{name}@1", version_aliases=[])

    client.merge_version_aliases(name=f"{name}@2", version_aliases=["production"])
    with pytest.raises(FailedPrecondition, match='move "default"'):
        client.delete_model_version(name=f"{name}@1")
    with pytest.raises(FailedPrecondition, match="production"):
        client.delete_model_version(name=f"{name}@2")
    with pytest.raises(FailedPrecondition, match="only version"):
        client.delete_model_version(name=f"{_upload(client, 'lone').model}@1")
    client.merge_version_aliases(name=f"{name}@3", version_aliases=["doomed"])
    client.merge_version_aliases(name=f"{name}@doomed", version_aliases=["-doomed"])
    client.delete_model_version(name=f"{name}@3").result(timeout=30)
    with pytest.raises(NotFound, match="no version 3"):
        client.get_model(name=f"{name}@3")
    assert _upload(client, "e4", parent_model=name).model_version_id == "4", "version ids are never reused"


def test_models_survive_a_restart(tmp_path: Path):
    state = tmp_path / "state"
    first = launch_emulator(state, tmp_path / "first.log")
    try:
        client = model_client(first.address)
        name = _upload(client, "s1", model_id="kept").model
        _upload(client, "s2", parent_model=name)
        client.merge_version_aliases(name=f"{name}@2", version_aliases=["production"])
        operation = client.upload_model(request={"parent": PARENT, "parent_model": name, "model": _model("s3")})
        operation.result(timeout=30)
    finally:
        first.stop()
    second = launch_emulator(state, tmp_path / "second.log")
    try:
        client = model_client(second.address)
        assert [v.version_id for v in client.list_model_versions(name=name)] == ["1", "2", "3"]
        assert client.get_model(name=f"{name}@production").labels["run_id"] == "s2"
        assert client.get_operation(request={"name": operation.operation.name}).done
        assert _upload(client, "s4", parent_model=name).model_version_id == "4"
    finally:
        second.stop()


def test_high_level_sdk_model_works_through_the_tls_port(registry):
    """aiplatform.init(api_endpoint=...) always opens a TLS channel: the SDK reaches the emulator's --tls-cert port."""
    process, client = registry
    prefix = "Vertex emulator listening with TLS on "
    lines = [line for line in process.log_path.read_text().splitlines() if line.startswith(prefix)]
    if not lines:
        pytest.skip("no openssl command to make the emulator a certificate, so no TLS port for the SDK")
    model_id = f"sdk-{uuid.uuid4().hex[:8]}"
    arguments = (lines[0].removeprefix(prefix), PROJECT, "europe-west1", model_id)
    probe = subprocess.run(
        [sys.executable, "-m", "tests.integration.vertex_emulator.sdk_models_probe", *arguments],
        cwd=REPO_ROOT,
        env={**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(process.log_path.parent / "cert.pem")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    seen = json.loads(probe.stdout.strip().splitlines()[-1])
    name = f"{PARENT}/models/{model_id}"
    assert seen["first"] == [name, "1", ["default"]]
    assert seen["second"] == [name, "2", ["candidate"]]
    assert seen["versions"] == ["1", "2"]
    assert seen["production"] == ["2", "sdk2", "gs://landfall-local/runs/sdk2/model"]
    assert seen["listed"] == [[name, "1"]], "Model.list answers the model once, at its default version"
    assert sorted(client.get_model(name=f"{name}@production").version_aliases) == ["candidate", "production"]


def test_update_model_version_order_and_delete_model(registry):
    _, client = registry
    name = _upload(client, "u1", model_id=f"upd-{uuid.uuid4().hex[:8]}").model
    _upload(client, "u2", parent_model=name)
    change = {"name": f"{name}@2", "labels": {"run_id": "u2", "decision": "promoted"}, "version_description": "won"}
    updated = client.update_model(model=change, update_mask={"paths": ["labels", "version_description"]})
    assert updated.version_id == "2" and updated.labels["decision"] == "promoted"
    assert updated.version_update_time > updated.version_create_time
    assert client.get_model(name=f"{name}@1").version_description == "", "only the named version changes"
    with pytest.raises(InvalidArgument, match="update_mask"):
        client.update_model(model={"name": name, "artifact_uri": "gs://b/x"}, update_mask={"paths": ["artifact_uri"]})

    newest = client.list_model_versions(request={"name": name, "order_by": "create_time desc", "page_size": 1})
    assert [p.models[0].version_id for p in newest.pages] == ["2", "1"]
    with pytest.raises(InvalidArgument, match="order_by"):
        client.list_model_versions(request={"name": name, "order_by": "display_name"})
    with pytest.raises(InvalidArgument, match="without"):
        client.list_model_versions(request={"name": f"{name}@1"})

    third = _model("u3", version_aliases=["default", "fresh"])
    client.upload_model(request={"parent": PARENT, "parent_model": name, "model": third}).result(timeout=30)
    assert client.get_model(name=name).version_id == "3", "an upload naming `default` takes it (SDK is_default_version)"
    assert client.get_model(name=f"{name}@1").version_aliases == []

    client.delete_model(name=name).result(timeout=30)
    with pytest.raises(NotFound, match="does not exist"):
        client.get_model(name=name)
    assert name not in {m.name for m in client.list_models(parent=PARENT)}


def test_fault_plan_reaches_model_service(registry):
    process, client = registry
    name = _upload(client, "f1").model
    control.set_faults(process.address, {"rate_limits": [{"method": "UploadModel", "limit": 1, "window_seconds": 600}]})
    try:
        _upload(client, "f2", parent_model=name)
        with pytest.raises(ResourceExhausted, match="Job or LRO submission requests"):
            _upload(client, "f3", parent_model=name)
        assert client.get_model(name=name).version_id == "1", "other methods are not limited"
        calls = control.get_faults(process.address)["calls"]
        assert isinstance(calls, dict) and calls["UploadModel europe-west1"] == {"calls": 1, "refused": 1}
    finally:
        control.set_faults(process.address, {})
    assert [v.version_id for v in client.list_model_versions(name=name)] == ["1", "2"], "a refused upload adds nothing"
