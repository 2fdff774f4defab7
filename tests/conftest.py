"""Session fixtures that start Google's emulators and fake-gcs-server on free loopback ports.

Each fixture sets the standard variable (PUBSUB_EMULATOR_HOST, FIRESTORE_EMULATOR_HOST, STORAGE_EMULATOR_HOST)
and GOOGLE_CLOUD_PROJECT, so the official client libraries reach the emulator exactly as a user's code would.
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deploy.local import processes, services

PROJECT = "landfall-local"
STACK_GROUP = "e2e-stack"
"""The pytest-xdist work unit of every test on the shared local stack (tests/e2e/conftest.py): one worker runs them
all, one after the other, on one stack, while the other worker runs everything else."""
ALONE = "alone"
"""Marker of a test that must not run beside another stack (the default ports): `make test` runs it after the
parallel pass, by itself."""


SHARED_STAGE = frozenset(
    {
        "tests/unit/test_deploy_plan.py",
        "tests/unit/test_deploy_cli.py",
        "tests/unit/test_deploy_execute.py",
        "tests/unit/test_deploy_bundles.py",
        "tests/unit/test_deploy_ui.py",
        "tests/unit/test_plan_custom_job_project.py",
        "tests/integration/test_deploy_gcloud.py",
        "tests/integration/test_deploy_bundle.py",
    }
)
"""Modules whose tests may stage bundles under the repository's .landfall/deploy/ (deploy/gcp/bundles.py's
STAGE_DIR, relative to the working directory): one worker runs them, one at a time (two at once raced)."""


def work_unit(nodeid: str) -> str:
    """The tests one pytest-xdist worker runs together under `make test` (`-n 2 --dist loadgroup`).

    Each worker is a process of its own: its own session emulators (free ports), its own tmp dirs and environment.
    What must stay together is one unit: the tests of tests/e2e, on the shared local stack (one stack in one worker:
    two stacks would fight for two cores), except the modules with stacks of their own (OWN_STACKS, a unit each);
    the modules that stage under .landfall/deploy/; each integration module, so that its module fixtures start once.
    Every other unit test is a unit by itself.
    """
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/e2e/") and path not in OWN_STACKS:
        return STACK_GROUP
    if path in SHARED_STAGE:
        return "deploy-stage"
    if path.startswith(("tests/integration/", "tests/e2e/")):
        return path
    return nodeid


OWN_STACK = "tests/e2e/test_stack_lifecycle.py"
"""The e2e module that starts stacks of its own (its own unit: minutes, whatever its count of tests)."""
OWN_STACKS = (OWN_STACK, "tests/e2e/test_second_region.py")
"""Every e2e module with a stack of its own, each its own unit."""


def unit_order(unit: str, tests: int) -> tuple[int, int]:
    """Which unit a free worker takes first: the shared stack's (the longest: it starts at once), then the module
    with stacks of its own, then the units that start emulators or processes (integration modules, the deploy
    stage), most tests first, and the unit tests (each well under a second) last, so that they fill the end and
    both workers finish together. xdist's own order (most tests first) put one-test integration modules of a minute
    behind the unit tests, at the end, with the other worker idle."""
    if unit == STACK_GROUP:
        return (0, -tests)
    if unit in OWN_STACKS:
        return (1, -tests)
    if unit.startswith(("tests/integration/", "tests/e2e/")) or unit == "deploy-stage":
        return (2, -tests)
    return (3, -tests)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` with the units of work_unit, handed out in unit_order. xdist's own loadgroup reads
    `xdist_group` marks through a node id suffix that pytest 9 no longer lets a plugin set, so it would spread the
    stack's tests over both workers (a stack each); this scheduler groups by path instead."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from collections import OrderedDict

    from xdist.scheduler import LoadScopeScheduling

    class WorkUnits(LoadScopeScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if not self.ordered:  # the queue is complete once the first unit is handed out
                queue: OrderedDict[str, dict[str, bool]] = self.workqueue
                units = sorted(queue.items(), key=lambda item: unit_order(item[0], len(item[1])))
                queue.clear()
                queue.update(units)
                self.ordered = True
            super()._assign_work_unit(node)

    return WorkUnits(config, log)


@dataclass(frozen=True)
class Emulator:
    host: str
    """host:port on 127.0.0.1."""

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}"


@pytest.fixture(scope="session", autouse=True)
def _project_env() -> Iterator[None]:
    previous = os.environ.get("GOOGLE_CLOUD_PROJECT")
    os.environ["GOOGLE_CLOUD_PROJECT"] = PROJECT
    yield
    if previous is None:
        os.environ.pop("GOOGLE_CLOUD_PROJECT", None)
    else:
        os.environ["GOOGLE_CLOUD_PROJECT"] = previous


def _run(spec: processes.ServiceSpec, log_dir: Path, variable: str, value: str) -> Iterator[Emulator]:
    service = processes.start(spec, log_dir)
    os.environ[variable] = value
    try:
        yield Emulator(f"{services.HOST}:{service.port}")
    finally:
        os.environ.pop(variable, None)
        processes.stop(service)


@pytest.fixture(scope="session")
def pubsub_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    port = processes.free_port()
    yield from _run(
        services.pubsub(port), tmp_path_factory.mktemp("pubsub"), "PUBSUB_EMULATOR_HOST", f"{services.HOST}:{port}"
    )


@pytest.fixture(scope="session")
def firestore_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    port = processes.free_port()
    yield from _run(
        services.firestore(port),
        tmp_path_factory.mktemp("firestore"),
        "FIRESTORE_EMULATOR_HOST",
        f"{services.HOST}:{port}",
    )


@pytest.fixture()
def clean_firestore(firestore_emulator: Emulator) -> Emulator:
    """The Firestore emulator with every document deleted before the test."""
    url = f"{firestore_emulator.endpoint}/emulator/v1/projects/{PROJECT}/databases/(default)/documents"
    urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=60).close()
    return firestore_emulator


@pytest.fixture(scope="session")
def gcs_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """fake-gcs-server without notifications (tests that need notifications use the full stack)."""
    port = processes.free_port()
    spec = services.storage(port, project=PROJECT, notification_topic=None, bucket=None, pubsub_host=None)
    yield from _run(spec, tmp_path_factory.mktemp("gcs"), "STORAGE_EMULATOR_HOST", f"http://{services.HOST}:{port}")
