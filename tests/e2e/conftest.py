"""One whole local stack (every service on a free port) shared by the end-to-end tests of a session.

Package-scoped: it stops (and gives the environment back) once the last test of tests/e2e that uses it is done, so
a pytest-xdist worker that goes on to other tests runs them without the stack's variables. Under `make test`
(`--dist loadgroup`) every test using it is in one group (tests/conftest.py), run by one worker."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.local import stack
from deploy.local.bridge import ACKNOWLEDGED
from tests.conftest import OWN_STACKS
from trainer.fault_hooks import OOM_VARIABLE

ROUTES_FILE = Path(__file__).with_name("routes.toml")
REPO = Path(__file__).resolve().parents[2]
EXAMPLE_IMAGES = REPO / "examples" / "container" / "images.json"
# A second bucket Landfall accepts but fake-gcs does not notify about: events for it are sent by hand (CloudEvents).
EXTRA_BUCKET = "landfall-e2e-events"
OWN_IMAGE = "us-central1-docker.pkg.dev/landfall-local/landfall/e2e-own:1"
"""The own-image route's container (routes.toml), run by the Vertex emulator as tests/e2e/own_image_trainer.py."""
PROMOTION_IMAGE = "us-central1-docker.pkg.dev/landfall-local/landfall/e2e-promotion:1"
"""The promoted route's container (routes.toml), run by the Vertex emulator as tests/e2e/promotion_trainer.py."""
HOSTILE_IMAGE = "us-central1-docker.pkg.dev/landfall-local/landfall/e2e-hostile:1"
"""The hostile/ route's container (routes.toml), run by the Vertex emulator as tests/e2e/hostile_trainer.py."""
OOM_MARKER = "/e2e-oom/"
"""A dataset under a prefix holding this runs out of memory in the trainer (its test hook, off elsewhere)."""


_RAN: set[str] = set()
"""The end-to-end tests this process has run or skipped (the shared stack's grant check needs all of them)."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or report.skipped:
        _RAN.add(report.nodeid)


def _check_grants(request: pytest.FixtureRequest, info: stack.StackInfo) -> None:
    """Over the suite, no function's account was refused a Cloud Storage call (a grant the deploy lacks) and, when
    every test of the shared stack ran here, each used every Cloud Storage grant it holds (tests/iam_use.py)."""
    from tests import iam_use

    problems = iam_use.refused_calls(info.state_dir, info.env)
    shared = {item.nodeid for item in request.session.items if "local_stack" in getattr(item, "fixturenames", ())}
    modules = {item.nodeid.split("::", 1)[0] for item in request.session.items}
    every_module = {f"tests/e2e/{p.name}" for p in Path(__file__).parent.glob("test_*.py")} - set(OWN_STACKS)
    if every_module <= modules and shared <= _RAN and not request.config.getoption("keyword"):
        problems += iam_use.unused_grants(info.state_dir, info.env)
    if problems:
        pytest.fail("the deploy's grants do not match what the functions did on the stack:\n" + "\n".join(problems))


@pytest.fixture(scope="package")
def local_stack(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[stack.StackInfo]:
    ports = {name: 0 for name in stack.SERVICE_ORDER}
    state_dir = tmp_path_factory.mktemp("stack")
    images = state_dir / "images.json"
    example = json.loads((EXAMPLE_IMAGES).read_text())  # examples/container: the example image -> its script
    mapped = {image: [sys.executable, str(REPO / command[-1])] for image, command in example.items()}
    mapped[OWN_IMAGE] = [sys.executable, str(Path(__file__).with_name("own_image_trainer.py"))]
    mapped[PROMOTION_IMAGE] = [sys.executable, str(Path(__file__).with_name("promotion_trainer.py"))]
    mapped[HOSTILE_IMAGE] = [sys.executable, str(Path(__file__).with_name("hostile_trainer.py"))]
    images.write_text(json.dumps(mapped))
    routes = state_dir / "routes.toml"  # a copy the suite may edit while the stack runs (routes_file)
    routes.write_text(ROUTES_FILE.read_text())
    saved = dict(os.environ)
    # Inherited by every function process: test routes and teams (teams.toml: two teams under own-image/ only), a
    # one-second sweep schedule, the extra bucket.
    # The reconciler (ticking every second too) leaves a job that ended to the listener for 5 s, not a minute, and a
    # run refused capacity everywhere waits 2 s before its next round, not a minute.
    # The trainer's test hook (trainer/fault_hooks.py) runs out of memory on datasets whose URI holds OOM_MARKER.
    # The Vertex emulator runs OWN_IMAGE as own_image_trainer.py and PROMOTION_IMAGE as promotion_trainer.py
    # (LANDFALL_VERTEX_IMAGES, the emulator's --images).
    # A run planned past an hour runs a canary first (the canary/ route's; every other route plans minutes).
    os.environ.update(
        {
            "LANDFALL_ROUTES_FILE": str(routes),
            "LANDFALL_TEAMS_FILE": str(ROUTES_FILE.with_name("teams.toml")),
            "LANDFALL_SWEEP_EVERY_SECONDS": "1",
            "LANDFALL_ALLOWED_BUCKETS": f"landfall-landing,{EXTRA_BUCKET}",
            "LANDFALL_RECONCILE_GRACE_SECONDS": "5",
            "LANDFALL_WAIT_BACKOFF_SECONDS": "2",
            "LANDFALL_CANARY_MIN_HOURS": "1",
            # Off in the suite: which run is a workload's first on a shape would depend on the order tests run in
            # (each run measures its workload); the rule is shown in tests/unit/test_canary.py.
            "LANDFALL_CANARY_FIRST_RUNS": "0",
            OOM_VARIABLE: OOM_MARKER,
            stack.VERTEX_IMAGES_ENV: str(images),
        }
    )
    from tests.caches import clear_function_caches

    try:
        with stack.running_stack(state_dir, ports) as info:
            os.environ.update(info.env)
            clear_function_caches()
            yield info
            _check_grants(request, info)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        clear_function_caches()


@pytest.fixture()
def routes_file(local_stack: stack.StackInfo) -> Iterator[Path]:
    """The running stack's routes file (a copy of tests/e2e/routes.toml), put back as it was after the test."""
    path = Path(os.environ["LANDFALL_ROUTES_FILE"])
    kept = path.read_text()
    try:
        yield path
    finally:
        path.write_text(kept)


@pytest.fixture(scope="package")
def firestore_runs(local_stack: stack.StackInfo) -> Any:
    from google.cloud import firestore

    return firestore.Client(project=local_stack.env["GOOGLE_CLOUD_PROJECT"]).collection("runs")


@pytest.fixture(scope="package")
def landing_bucket(local_stack: stack.StackInfo) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(project=local_stack.env["GOOGLE_CLOUD_PROJECT"], credentials=AnonymousCredentials())
    return client.bucket(local_stack.env["LANDFALL_LANDING_BUCKET"])


@pytest.fixture(scope="package")
def artifacts_bucket(local_stack: stack.StackInfo) -> Any:
    """The default region's artifacts bucket: where the stack's jobs write checkpoints, models and logs."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(project=local_stack.env["GOOGLE_CLOUD_PROJECT"], credentials=AnonymousCredentials())
    (first, *_) = local_stack.env["LANDFALL_ARTIFACT_BUCKETS"].split(",")
    return client.bucket(first.partition("=")[2])


def delivery_record(info: stack.StackInfo, function: str, message_id: str) -> list[str]:
    """What the delivery bridge logged about one message to one function: a line per attempt that failed or was
    acknowledged (deploy/local/bridge.py), oldest first."""
    mark = f"{function}: message {message_id} attempt "
    log = info.state_dir / "logs" / "bridge.log"
    return [line for line in log.read_text(errors="replace").splitlines() if mark in line]


def acknowledged_once(info: stack.StackInfo, function: str, message_id: str, timeout_s: float = 30) -> None:
    """Wait until the bridge says `function` acknowledged message_id, and check it took exactly one delivery: the
    message is settled (Pub/Sub does not deliver an acknowledged message again), so no test waits out a back-off
    to see whether it comes back."""
    from tests.polling import wait_for

    done = ACKNOWLEDGED.format(function=function, message_id=message_id, attempt=1)
    wait_for(
        lambda: any(done in line for line in delivery_record(info, function, message_id)),
        timeout_s,
        f"the bridge to log {done!r}",
    )
    record = delivery_record(info, function, message_id)
    assert len(record) == 1, f"message {message_id} to {function} took more than one delivery: {record}"


@pytest.fixture
def faults(local_stack: stack.StackInfo) -> Iterator[str]:
    """The Vertex emulator's address, its fault plan cleared before and after the test (deploy/vertex_emulator
    faults.py: set one with control.set_faults)."""
    from deploy.vertex_emulator import control

    address = local_stack.env["LANDFALL_VERTEX_ENDPOINT"]
    control.set_faults(address, {})
    yield address
    control.set_faults(address, {})
