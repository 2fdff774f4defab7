"""The dashboard's container as `landfall deploy` stages it, run the way its image would run it: the staged build
context, a fresh virtual environment holding exactly what deploy/ui/Dockerfile's `pip install` line installs, the
Dockerfile's CMD from the context's root with the service's environment (ui.env.yaml) and Cloud Run's PORT, and the
Firestore and Cloud Storage emulators in place of Google's: the dashboard answers its first page.

No Docker here (the machine has no daemon), so the image itself is not built; what this shows is that the context
holds every file the dashboard imports or reads, that its requirements files are all it needs, and that the CMD starts
it on $PORT. Skipped until the dashboard's package (landfall/ui/) is in the checkout.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.gcp import ui
from deploy.gcp.bundles import REPO_ROOT, read_env_yaml
from deploy.gcp.config import load_deploy_config
from deploy.gcp.plan import Target, function_env, names
from deploy.local.processes import free_port
from tests.conftest import Emulator
from tests.isolated_venv import requirements_venv, stop, wait_answering

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not all((REPO_ROOT / path).is_file() for path in ui.NEEDED),
        reason="the dashboard's package (landfall/ui/) is not in this checkout",
    ),
]

TARGET = Target(project="landfall-local", region="us-central1", ui_users=("group:ml-team@example.com",))
IMAGE = "us-central1-docker.pkg.dev/landfall-local/landfall/trainer:0123456789abcdef"


def dockerfile_install(context: Path) -> list[Path]:
    """The requirements files the Dockerfile's `pip install -r A -r B` line names, in the context."""
    text = (context / "Dockerfile").read_text()
    line = next(line for line in text.splitlines() if line.startswith("RUN python -m pip install "))
    words = shlex.split(line.removeprefix("RUN "))
    return [context / words[i + 1] for i, word in enumerate(words) if word == "-r"]


def dockerfile_cmd(context: Path) -> list[str]:
    found = re.search(r"^CMD (\[.*\])$", (context / "Dockerfile").read_text(), re.MULTILINE)
    assert found, "deploy/ui/Dockerfile has an exec-form CMD"
    words = json.loads(found.group(1))
    assert isinstance(words, list)
    return [str(word) for word in words]


@pytest.fixture(scope="module")
def served(
    firestore_emulator: Emulator, gcs_emulator: Emulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    spec = load_deploy_config().ui
    assert spec is not None
    n = names(TARGET)
    stage = tmp_path_factory.mktemp("stage")
    staged = ui.stage_ui(spec, n, function_env(n, IMAGE), TARGET.ui_users, (), out=stage)
    context = staged.context if staged.context.is_absolute() else REPO_ROOT / staged.context
    venv = requirements_venv(dockerfile_install(context), name="ui")
    port = free_port()
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/tmp"),
        **read_env_yaml((stage / ui.ENV_FILE).read_text()),
        "PORT": str(port),
        "FIRESTORE_EMULATOR_HOST": firestore_emulator.host,
        "STORAGE_EMULATOR_HOST": f"http://{gcs_emulator.host}",
        "PYTHONUNBUFFERED": "1",
    }
    log = tmp_path_factory.mktemp("ui") / "ui.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(dockerfile_cmd(context), cwd=context, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_answering(process, url, log, 90, "the staged dashboard")
        yield url, log
    finally:
        stop(process)


def test_the_staged_dashboard_serves_its_first_page_with_the_services_settings(served: tuple[str, Path]) -> None:
    url, log = served
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            body = response.read().decode()
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{url} answered {exc.code}; the dashboard's log:\n{log.read_text()[-4000:]}") from exc
    assert "Landfall" in body
