"""Configuration that takes effect: a route added to the running stack's routes file is used by the next drop on its
prefix, with no restart (deploy/reloading.py; docs/ingest.md, "Editing routes.toml"). The folder is dropped as a user
drops one, with `gcloud storage cp -r` and then the marker, through the stack's storage front."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from deploy.local import stack
from deploy.reloading import CHECK_INTERVAL_SECONDS
from landfall.synthetic import separable_csv_shards
from schemas.training_request import run_id_for
from tests.e2e.test_chain import terminal_run

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("gcloud") is None, reason="the gcloud CLI is not installed"),
]

NEW_ROUTE = """
[[routes]]
name = "added-while-running"
bucket = "*"
prefix = "added-while-running/"
readiness = ["marker"]
formats = ["csv"]
task = "tabular-classification"
model_preset = "mlp-small"

[routes.hyperparameters]
epochs = 2
batch_size = 32
learning_rate = 0.01
extra = {min_steps = "0", min_held_out = "0", early_stopping_patience = "0"}
"""


def gcloud(info: stack.StackInfo, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "CLOUDSDK_CONFIG": str(home / "gcloud"), **info.env}
    return subprocess.run(["gcloud", *args], env=env, capture_output=True, text=True, timeout=180, check=False)


def test_a_route_added_while_the_stack_runs_trains_the_next_drop_on_its_prefix_without_a_restart(
    local_stack: stack.StackInfo, routes_file: Path, firestore_runs: Any, landing_bucket: Any, tmp_path: Path
) -> None:
    running = {s.name: s.pid for s in stack.read_state(local_stack.state_dir)}
    routes_file.write_text(routes_file.read_text() + NEW_ROUTE)
    time.sleep(CHECK_INTERVAL_SECONDS + 0.5)  # each function looks at the file at most once a second

    folder = tmp_path / f"exports-{uuid.uuid4().hex[:8]}"
    (folder / "part").mkdir(parents=True)
    for i, text in enumerate(separable_csv_shards(shards=2, rows_per_shard=200, seed=11)):
        (folder / "part" / f"shard-{i}.csv").write_text(text)
    prefix = f"added-while-running/{folder.name}/"
    copied = gcloud(
        local_stack, tmp_path, "storage", "cp", "-r", str(folder), f"gs://{landing_bucket.name}/added-while-running/"
    )
    assert copied.returncode == 0, copied.stderr
    (tmp_path / "_SUCCESS").write_text("")
    marked = gcloud(
        local_stack, tmp_path, "storage", "cp", str(tmp_path / "_SUCCESS"), f"gs://{landing_bucket.name}/{prefix}"
    )
    assert marked.returncode == 0, marked.stderr

    generation = landing_bucket.get_blob(f"{prefix}_SUCCESS").generation
    doc = terminal_run(firestore_runs, run_id_for(f"gcs:{landing_bucket.name}/{prefix}:{generation}"), timeout_s=300)
    assert doc["state"] == "SUCCEEDED", doc.get("error")
    assert doc["request"]["dataset"]["object_count"] == 2
    assert doc["request"]["hyperparameters"]["epochs"] == 2  # the new route's, not the default route's 5
    assert {s.name: s.pid for s in stack.read_state(local_stack.state_dir)} == running  # none was restarted
