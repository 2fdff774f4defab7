"""Fixtures that run the Vertex emulator as a separate process and talk to it only through public clients.

- `emulator`: one emulator shared by these tests, publishing job events to a fresh topic on the Pub/Sub
  emulator (the `pubsub_emulator` fixture from tests/conftest.py).
- `vertex`: that emulator with no faults in force before and after the test.
- `job_events`: reads the events topic through a subscription and groups the LogEntry messages by job id.
- `start_emulator`: starts extra emulators (restart and --faults tests); they are stopped after the test.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from google.cloud import pubsub_v1

from deploy.vertex_emulator import control
from trainer.fault_hooks import OOM_VARIABLE

from .harness import PROBE_IMAGE, PROBE_MODULE, PROJECT, EmulatorProcess, JobEvents, launch_emulator


@pytest.fixture(scope="session")
def events_topic(pubsub_emulator) -> Iterator[tuple[str, str]]:
    """A fresh topic (the emulator creates it too, if absent) and a subscription on it."""
    topic_id = f"job-events-{uuid.uuid4().hex[:8]}"
    topic = f"projects/{PROJECT}/topics/{topic_id}"
    subscription = f"projects/{PROJECT}/subscriptions/{topic_id}-test"
    pubsub_v1.PublisherClient().create_topic(name=topic)
    pubsub_v1.SubscriberClient().create_subscription(name=subscription, topic=topic)
    yield topic_id, subscription


STACK_ONLY = {
    "FIRESTORE_EMULATOR_HOST": "127.0.0.1:8686",
    "LANDFALL_TEAMS_FILE": "/stack/teams.toml",
    "LANDFALL_VERTEX_ENDPOINT": "127.0.0.1:8090",
    "STORAGE_EMULATOR_HOST": "http://127.0.0.1:4443",
    OOM_VARIABLE: "no-such-dataset",
}
"""What the local stack puts in the emulator's environment besides the Pub/Sub host: the replicas get only
STORAGE_EMULATOR_HOST and the trainer's test hook of these (deploy/vertex_emulator/host_env.py)."""


@pytest.fixture(scope="session")
def emulator(events_topic, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    folder = tmp_path_factory.mktemp("vertex")
    images = folder / "images.json"
    images.write_text(json.dumps({PROBE_IMAGE: ["python", "-m", PROBE_MODULE]}))
    process = launch_emulator(
        folder / "state",
        folder / "emulator.log",
        ["--events-topic", events_topic[0], "--images", str(images)],
        env=STACK_ONLY,
    )
    yield process
    process.stop()


@pytest.fixture()
def vertex(emulator: EmulatorProcess) -> Iterator[EmulatorProcess]:
    """The module's emulator, with no faults in force before and after the test."""
    control.set_faults(emulator.address, {})
    yield emulator
    control.set_faults(emulator.address, {})


@pytest.fixture(scope="session")
def job_events(events_topic) -> JobEvents:
    return JobEvents(events_topic[1])


@pytest.fixture()
def start_emulator(tmp_path: Path, pubsub_emulator) -> Iterator[Callable[..., EmulatorProcess]]:
    started: list[EmulatorProcess] = []

    def start(*args: str, state_dir: Path | None = None) -> EmulatorProcess:
        log_path = tmp_path / f"emulator-{len(started)}.log"
        process = launch_emulator(state_dir or tmp_path / "state", log_path, args)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()
