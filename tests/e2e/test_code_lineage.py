"""Lineage by what trained it: a route binds a team's script by its path; the team uploads a new version of the script
between two drops; each run trains the version that was there when it was planned, and the route's one registry
model gets two versions whose lineage names two different generations and digests of the script."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from deploy.local import stack
from deploy.reloading import CHECK_INTERVAL_SECONDS
from functions.wiring import model_registry
from schemas.run_record import RunState
from schemas.training_request import run_id_for
from tests.e2e.test_hostile_figures import _registered

pytestmark = pytest.mark.e2e
SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "ddp_script" / "train.py"
SCRIPT_NAME = "teams/e2e-lineage/train.py"
BOUND_ROUTE = """
[[routes]]
name = "bound-script"
bucket = "*"
prefix = "bound-script/"
readiness = ["marker"]
formats = ["csv"]
task = ""
model_preset = ""

[routes.trainer]
script = "gs://{code_bucket}/{script}"
args = ["--epochs", "2"]

[routes.workload]
parameters = 10
"""


def _drop(bucket: Any, prefix: str, part: int) -> str:
    rows = "a,b,y\n" + "".join(f"{i},{(i * part) % 5},{2 * i + part}\n" for i in range(60))
    bucket.blob(f"{prefix}part-{part}.csv").upload_from_string(rows, content_type="text/csv")
    marker = bucket.blob(f"{prefix}_SUCCESS")
    marker.upload_from_string("")
    marker.reload()
    return run_id_for(f"gcs:{bucket.name}/{prefix}:{marker.generation}")


def test_a_route_bound_script_uploaded_again_between_drops_gives_two_versions_naming_two_digests(
    local_stack: stack.StackInfo, routes_file: Path, firestore_runs: Any, landing_bucket: Any
) -> None:
    code = landing_bucket.client.bucket(local_stack.env["LANDFALL_CODE_BUCKET"])
    routes_file.write_text(routes_file.read_text() + BOUND_ROUTE.format(code_bucket=code.name, script=SCRIPT_NAME))
    time.sleep(CHECK_INTERVAL_SECONDS + 0.5)  # each function looks at the routes file at most once a second
    first_code = SCRIPT.read_text()
    code.blob(SCRIPT_NAME).upload_from_string(first_code)
    first = _registered(local_stack, firestore_runs, _drop(landing_bucket, "bound-script/sales/", 1))
    assert first.state == RunState.SUCCEEDED, (first.error, first.history)

    code.blob(SCRIPT_NAME).upload_from_string(first_code + "\n# the team's second version\n")
    second = _registered(local_stack, firestore_runs, _drop(landing_bucket, "bound-script/sales/", 2))
    assert second.state == RunState.SUCCEEDED, (second.error, second.history)

    (one,), (two,) = first.code, second.code
    assert one.uri == two.uri == f"gs://{code.name}/{SCRIPT_NAME}"
    assert one.generation != two.generation and one.crc32c != two.crc32c
    assert first.model is not None and second.model is not None
    assert first.model.model == second.model.model, "the route binds the script: one model, two versions"
    registry = model_registry()
    named = []
    for run in (first, second):
        version = registry.get(run.model.version_name)  # type: ignore[union-attr]
        assert version is not None
        objects = version.metadata["lineage"]["code"]["objects"]
        named.append((objects[0]["generation"], objects[0]["crc32c"]))
    assert named == [(one.generation, one.crc32c), (two.generation, two.crc32c)]
