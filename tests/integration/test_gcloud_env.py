"""With the variables `landfall up` writes to .landfall/env, the gcloud CLI's command groups a user
runs against the stack (pubsub, storage) reach the local emulators, not Google. gcloud runs for real, with an
empty configuration folder and no credentials; what it wrote is read back through the emulators."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from deploy.local.stack import stack_env
from deploy.topology import load_topology
from tests.conftest import PROJECT, Emulator

pytestmark = pytest.mark.skipif(shutil.which("gcloud") is None, reason="the gcloud CLI is not installed")


def port(emulator: Emulator) -> int:
    return int(emulator.host.rsplit(":", 1)[1])


@pytest.fixture()
def sourced_env(pubsub_emulator: Emulator, gcs_emulator: Emulator, tmp_path: Path) -> dict[str, str]:
    """A shell that sourced .landfall/env: exactly the stack's variables (for these emulators' ports)."""
    env = stack_env(
        load_topology(), {"pubsub": port(pubsub_emulator), "storage": port(gcs_emulator), "firestore": 1, "vertex": 1}
    )
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
