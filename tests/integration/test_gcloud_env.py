"""With the variables `landfall up` writes to .landfall/env, the gcloud CLI's command groups a user
runs against the stack (pubsub, storage) reach the local emulators, not Google. gcloud runs for real, with an
empty configuration folder and no credentials; what it wrote is read back through the emulators. `gcloud storage`
goes through the stack's storage front (deploy/local/storage_front.py), so its recursive copies work too."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.local import processes, services
from deploy.local.stack import stack_env
from deploy.topology import load_topology
from tests.conftest import PROJECT, Emulator

pytestmark = pytest.mark.skipif(shutil.which("gcloud") is None, reason="the gcloud CLI is not installed")


def port(emulator: Emulator) -> int:
    return int(emulator.host.rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def storage_front(gcs_emulator: Emulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The stack's storage front before gcs_emulator, as `landfall up` starts it: its port."""
    folder = tmp_path_factory.mktemp("storage-front")
    topology = load_topology()
    spec = services.storage_front(
        processes.free_port(),
        upstream=gcs_emulator.endpoint,
        landing=topology.bucket,
        code=topology.code_bucket,
        artifacts=f"{topology.default_region}=unused-artifacts",
        teams_file="",
        record=folder / "iam-used.jsonl",
    )
    service = processes.start(spec, folder)
    assert service.port is not None
    try:
        yield service.port
    finally:
        processes.stop(service)


@pytest.fixture()
def sourced_env(
    pubsub_emulator: Emulator, gcs_emulator: Emulator, storage_front: int, tmp_path: Path
) -> dict[str, str]:
    """A shell that sourced .landfall/env: exactly the stack's variables (for these emulators' ports)."""
    ports = {
        "pubsub": port(pubsub_emulator),
        "storage": port(gcs_emulator),
        "storage_front": storage_front,
        "pubsub_front": 1,
    }
    env = stack_env(load_topology(), {**ports, "firestore": 1, "vertex": 1})
    assert env["CLOUDSDK_CORE_PROJECT"] == PROJECT
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),
        "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
        **env,
    }


def gcloud(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["gcloud", *args], env=env, capture_output=True, text=True, timeout=120)


def test_gcloud_pubsub_topics_publish_reaches_the_emulator(sourced_env: dict[str, str]) -> None:
    from google.cloud import pubsub_v1

    topic = f"projects/{PROJECT}/topics/gcloud-{uuid.uuid4().hex[:8]}"
    subscription = topic.replace("/topics/", "/subscriptions/")
    pubsub_v1.PublisherClient().create_topic(name=topic)
    subscriber = pubsub_v1.SubscriberClient()
    subscriber.create_subscription(name=subscription, topic=topic)
    published = gcloud(
        sourced_env,
        "pubsub",
        "topics",
        "publish",
        topic.rsplit("/", 1)[1],
        "--message=hello",
        "--attribute=source=gcloud",
    )
    assert published.returncode == 0, published.stderr
    assert "messageIds" in published.stdout
    pulled = subscriber.pull(subscription=subscription, max_messages=1, timeout=30)
    (received,) = pulled.received_messages
    assert received.message.data == b"hello" and received.message.attributes["source"] == "gcloud"
    subscriber.close()


def test_gcloud_storage_cp_reaches_the_emulator(sourced_env: dict[str, str], tmp_path: Path) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    bucket = storage.Client(project=PROJECT, credentials=AnonymousCredentials()).create_bucket(
        f"gcloud-{uuid.uuid4().hex[:8]}"
    )
    local = tmp_path / "rows.csv"
    local.write_text("a,label\n1,0\n")
    copied = gcloud(sourced_env, "storage", "cp", str(local), f"gs://{bucket.name}/data/rows.csv")
    assert copied.returncode == 0, copied.stderr
    assert bucket.blob("data/rows.csv").download_as_text() == "a,label\n1,0\n"


def _bucket() -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(project=PROJECT, credentials=AnonymousCredentials()).create_bucket(
        f"gcloud-{uuid.uuid4().hex[:8]}"
    )


def _dataset_folder(root: Path) -> dict[str, bytes]:
    """A folder as users drop it: CSV shards of megabytes, a subfolder, a long name. Relative path -> content."""
    files = {
        "part-00000.csv": b"a,b,label\n" + b"".join(b"%d,%d,%d\n" % (i, i * 7 % 13, i % 2) for i in range(150_000)),
        "part-00001.csv": b"a,b,label\n" + b"".join(b"%d,%d,%d\n" % (i, i * 5 % 11, i % 2) for i in range(20_000)),
        "images/" + "n" * 180 + ".bin": os.urandom(3 * 1024 * 1024),
    }
    for relative, content in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(content)
    return files


def test_gcloud_storage_cp_recursive_keeps_the_folder_and_every_byte(
    sourced_env: dict[str, str], tmp_path: Path
) -> None:
    bucket = _bucket()
    local = tmp_path / "mydata"
    files = _dataset_folder(local)
    assert len(files["part-00000.csv"]) > 1024 * 1024
    copied = gcloud(sourced_env, "storage", "cp", "-r", str(local), f"gs://{bucket.name}/datasets/")
    assert copied.returncode == 0, copied.stderr
    landed = {blob.name: blob for blob in bucket.list_blobs(prefix="datasets/")}
    assert sorted(landed) == sorted(f"datasets/mydata/{name}" for name in files)
    for name, content in files.items():
        assert landed[f"datasets/mydata/{name}"].download_as_bytes() == content

    # and back down, recursively, as README's `gcloud storage cp -r gs://.../logs /tmp/RUN_ID` does
    down = tmp_path / "down"
    down.mkdir()
    fetched = gcloud(sourced_env, "storage", "cp", "-r", f"gs://{bucket.name}/datasets/mydata", str(down))
    assert fetched.returncode == 0, fetched.stderr
    assert {str(p.relative_to(down / "mydata")) for p in down.rglob("*") if p.is_file()} == set(files)


def test_gcloud_storage_rsync_and_wildcards_reach_the_emulator(sourced_env: dict[str, str], tmp_path: Path) -> None:
    bucket = _bucket()
    local = tmp_path / "mydata"
    files = _dataset_folder(local)
    synced = gcloud(sourced_env, "storage", "rsync", "-r", str(local), f"gs://{bucket.name}/synced/")
    assert synced.returncode == 0, synced.stderr
    assert sorted(b.name for b in bucket.list_blobs(prefix="synced/")) == sorted(f"synced/{n}" for n in files)
    shards = gcloud(sourced_env, "storage", "cp", str(local / "part-*.csv"), f"gs://{bucket.name}/shards/")
    assert shards.returncode == 0, shards.stderr
    assert sorted(b.name for b in bucket.list_blobs(prefix="shards/")) == [
        "shards/part-00000.csv",
        "shards/part-00001.csv",
    ]


def test_gcloud_storage_cp_recursive_to_a_missing_bucket_says_not_found(
    sourced_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.csv").write_text("a\n1\n")
    copied = gcloud(sourced_env, "storage", "cp", "-r", str(tmp_path / "d"), f"gs://missing-{uuid.uuid4().hex[:8]}/x/")
    assert copied.returncode != 0
    assert "404" in copied.stderr
