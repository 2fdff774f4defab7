"""What `landfall deploy` stages: function bundles hold exactly what a function needs, the trainer's build context
exactly what trainer/Dockerfile copies; the Dockerfile's base matches the tested torch; the Firestore indexes cover
the CLI's queries; the probes recognise what gcloud lists."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from deploy.gcp import bundles
from deploy.gcp.bundles import REPO_ROOT, TRAINER_CONTEXT, BundleError, function_requirements
from deploy.gcp.config import DeliveryPolicy, DeployConfigError, delivery_policy, load_deploy_config
from deploy.gcp.firestore import load_indexes
from deploy.gcp.plan import _has_notification
from deploy.images import trainer_entrypoint, trainer_image
from deploy.vertex_emulator.launch import image_entrypoint


@pytest.fixture(scope="module")
def dispatch_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("stage")
    bundle = bundles.stage_function("dispatch", {"GOOGLE_CLOUD_PROJECT": "p"}, out=out)
    return bundle.source


def relative_files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_a_function_bundle_holds_its_package_schemas_deploy_data_main_and_requirements(dispatch_bundle: Path) -> None:
    files = relative_files(dispatch_bundle)
    tops = {f.split("/")[0] for f in files}
    assert tops == {"functions", "schemas", "deploy", "main.py", "requirements.txt", ".gcloudignore"}
    assert {f for f in files if f.startswith("deploy/")} == {
        "deploy/__init__.py",
        "deploy/topology.py",
        "deploy/images.py",
        "deploy/routes.py",
        "deploy/teams.py",
        "deploy/reloading.py",
        "deploy/topology.toml",
        "deploy/routes.toml",
        "deploy/teams.toml",
    }
    source = {
        p.relative_to(REPO_ROOT).as_posix()
        for d in ("functions", "schemas")
        for p in (REPO_ROOT / d).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and "examples" not in p.parts and p.suffix != ".pyc"
    }
    assert {f for f in files if f.split("/")[0] in ("functions", "schemas")} == source
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc") or "/tests/" in f or "examples/" in f]
    assert "functions/planning/data/machines.json" in files and "schemas/data/model_presets.json" in files


def test_the_bundle_main_re_exports_the_entry_point(dispatch_bundle: Path) -> None:
    main = (dispatch_bundle / "main.py").read_text()
    assert "from functions.main import dispatch" in main
    compile(main, "main.py", "exec")


def test_bundle_requirements_are_the_functions_pins_without_torch_or_test_tools(dispatch_bundle: Path) -> None:
    text = (dispatch_bundle / "requirements.txt").read_text()
    assert text == (REPO_ROOT / "functions" / "requirements.txt").read_text()
    pins = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert all(re.fullmatch(r"[a-z0-9-]+==[0-9.]+", pin) for pin in pins), pins
    names = {pin.split("==")[0] for pin in pins}
    assert "functions-framework" in names and not names & set(bundles.NOT_FOR_FUNCTIONS)


def test_requirements_naming_torch_are_refused(tmp_path: Path) -> None:
    (tmp_path / "functions").mkdir()
    (tmp_path / "functions" / "requirements.txt").write_text("functions-framework==3.10.2\ntorch==2.13.0\n")
    with pytest.raises(BundleError, match="'torch'"):
        function_requirements(tmp_path)


def dockerfile() -> str:
    return (REPO_ROOT / trainer_image().dockerfile).read_text()


def test_the_trainer_context_is_exactly_what_the_dockerfile_copies(tmp_path: Path) -> None:
    folder, digest = bundles.stage_trainer(out=tmp_path)
    copied = [line.split()[1].rstrip("/") for line in dockerfile().splitlines() if line.startswith("COPY ")]
    assert set(copied) == {"trainer/requirements.txt", *TRAINER_CONTEXT}
    files = relative_files(folder)
    for source in copied:
        assert any(f == source or f.startswith(source + "/") for f in files), source
    assert {f.split("/")[0] for f in files} == {"Dockerfile", ".gcloudignore", "trainer", "schemas"}
    assert (folder / "Dockerfile").read_text() == dockerfile()
    assert bundles.stage_trainer(out=tmp_path)[1] == digest, "the tag is the content hash: same content, same tag"
    allowed = [
        line[1:].rstrip("/") for line in (REPO_ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")
    ]
    assert set(allowed) == set(TRAINER_CONTEXT), ".dockerignore lets in what the Dockerfile copies"


def test_the_base_image_is_the_official_pytorch_image_of_the_tested_torch() -> None:
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", dockerfile(), re.MULTILINE)
    assert base, "trainer/Dockerfile names its base in ARG BASE_IMAGE"
    torch_pin = re.search(r"^torch==([0-9.]+)$", (REPO_ROOT / "trainer" / "requirements.txt").read_text(), re.MULTILINE)
    assert torch_pin and base.group(1).startswith(f"pytorch/pytorch:{torch_pin.group(1)}-cuda")
    assert base.group(1).endswith("-runtime") and "latest" not in base.group(1)
    assert f"v == '{torch_pin.group(1)}'" in dockerfile() and "sys.version_info >= (3, 11)" in dockerfile()
    pins = [
        line
        for line in (REPO_ROOT / "trainer" / "requirements.txt").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert [p for p in pins if p.startswith("torch")] == [f"torch=={torch_pin.group(1)}"], (
        "the trainer's torch pin is the base image's version, so pip keeps the base's CUDA build"
    )


def test_the_emulator_runs_the_dockerfile_entrypoint_for_the_trainer_image() -> None:
    assert trainer_entrypoint() == ("python", "-m", "trainer.launcher")
    for uri in (
        "us-central1-docker.pkg.dev/landfall-local/landfall/trainer:local",
        "europe-west4-docker.pkg.dev/other-project/landfall/trainer:0123abcd",
        "us-docker.pkg.dev/p/landfall/trainer@sha256:" + "0" * 64,
    ):
        assert image_entrypoint(uri) == trainer_entrypoint(), uri
    for uri in (
        "us-docker.pkg.dev/p/landfall/other:1",
        "docker.io/landfall/trainer:1",
        "us-central1-docker.pkg.dev/p/landfall/trainer",
    ):
        assert image_entrypoint(uri) is None, uri


# --- Firestore indexes cover the CLI's queries -------------------------------------------------------------------


class RecordingQuery:
    """Records where/order_by the way a Firestore query is built; streams nothing."""

    def __init__(self, collection: str, log: list[dict[str, Any]]) -> None:
        self.shape: dict[str, Any] = {"collection": collection, "equals": [], "ranges": [], "order": None}
        log.append(self.shape)

    def where(self, *, filter: Any) -> RecordingQuery:
        self.shape["equals" if filter.op_string == "==" else "ranges"].append(filter.field_path)
        return self

    def order_by(self, field: str, direction: str) -> RecordingQuery:
        self.shape["order"] = (field, direction)
        return self

    def limit(self, _: int) -> RecordingQuery:
        return self

    def stream(self, **_options: Any) -> list[Any]:  # retry=, timeout= as Firestore takes them
        return []


def test_every_filtered_cli_query_has_its_composite_index(monkeypatch: pytest.MonkeyPatch) -> None:
    from landfall.commands import runs
    from landfall.queries import datasets
    from landfall.queries import runs as stored_runs

    log: list[dict[str, Any]] = []
    monkeypatch.setattr(stored_runs, "runs_collection", lambda: RecordingQuery("runs", log))
    monkeypatch.setattr(datasets, "datasets_collection", lambda: (RecordingQuery("datasets", log), "datasets"))
    since = runs.since_argument("2026-11-22T10:00:00Z")
    for state, dataset, team, after in itertools.product(
        (None, "RUNNING"), (None, "gs://b/p/"), (None, "vision"), (None, since)
    ):
        stored_runs.recent_runs(state, 5, dataset, after, team=team)  # the dashboard's filters: landfall/ui
    datasets.list_datasets("WAITING", 5)
    datasets.list_datasets(None, 5)
    indexes = load_indexes(REPO_ROOT / load_deploy_config().firestore_indexes)
    assert all(q["ranges"] in ([], [q["order"][0]]) for q in log), "a range on a field other than the order"
    needed = [q for q in log if q["equals"] and q["order"]]
    assert len(needed) == 15  # runs: each non-empty set of state, dataset, team, with and without since; datasets
    for query in needed:
        field, direction = query["order"]
        wanted = (*((f, "ASCENDING") for f in query["equals"]), (field, direction))
        assert any(i.collection_group == query["collection"] and i.fields == wanted for i in indexes), query
    from deploy.topology import load_topology

    topology = load_topology()
    assert {i.collection_group for i in indexes} <= {topology.runs_collection, topology.datasets_collection}


def test_the_probes_recognise_what_gcloud_lists() -> None:
    index = load_indexes(REPO_ROOT / load_deploy_config().firestore_indexes)[0]
    listed = {
        "name": f"projects/p/databases/(default)/collectionGroups/{index.collection_group}/indexes/CICAgJ",
        "queryScope": "COLLECTION",
        "state": "READY",
        "fields": [
            *({"fieldPath": f, "order": o} for f, o in index.fields),
            {"fieldPath": "__name__", "order": "DESCENDING"},
        ],
    }
    assert index.matches(listed)
    assert not index.matches({**listed, "fields": listed["fields"][:1]})
    notification = [
        {
            "Bucket URL": "gs://b",
            "Notification Configuration": {
                "id": "7",
                "topic": "//pubsub.googleapis.com/projects/p/topics/landfall-object-events",
                "object_name_prefix": "datasets/",
                "event_types": ["OBJECT_FINALIZE"],
                "payload_format": "JSON_API_V1",
            },
        }
    ]
    assert _has_notification(json.dumps(notification), "projects/p/topics/landfall-object-events", "datasets/")
    assert not _has_notification(json.dumps(notification), "projects/p/topics/landfall-object-events", "exports/")
    assert not _has_notification("not json", "projects/p/topics/t", "")


def test_delivery_policy_is_the_topology_the_local_stack_applies(tmp_path: Path) -> None:
    """One source: the deployer's subscription flags are the [functions.*] retry/dead_letter the bridge applies."""
    from deploy.topology import load_topology

    route = load_topology().function("dispatch")
    policy = delivery_policy("dispatch")
    assert policy == DeliveryPolicy(
        route.dead_letter.topic,
        route.dead_letter.max_delivery_attempts,
        route.retry.minimum_backoff_seconds,
        route.retry.maximum_backoff_seconds,
    )
    text = (REPO_ROOT / "deploy" / "topology.toml").read_text()
    broken = tmp_path / "topology.toml"
    broken.write_text(text.replace("max_delivery_attempts = 15", "max_delivery_attempts = 3", 1))
    with pytest.raises(DeployConfigError, match="max_delivery_attempts"):
        delivery_policy("dispatch", broken)


def test_a_basic_role_in_the_topology_is_refused(tmp_path: Path) -> None:
    text = (
        (REPO_ROOT / "deploy" / "topology.toml")
        .read_text()
        .replace('{ role = "roles/aiplatform.user", on = "project" }', '{ role = "roles/editor", on = "project" }')
    )
    assert "roles/editor" in text
    path = tmp_path / "topology.toml"
    path.write_text(text)
    with pytest.raises(DeployConfigError, match="basic role"):
        load_deploy_config(path)
