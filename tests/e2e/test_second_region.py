"""A team's code in a second deployed region, through a stack of its own that enforces the deploy's IAM: the stack
runs jobs in us-central1 and europe-west4 (LANDFALL_JOB_REGIONS), each with its own artifacts bucket; the team's
script, package and image, pinned to europe-west4, run as the team's own trainer identity and SUCCEED, their listing,
model and outputs in that region's bucket, and no function was refused a Cloud Storage call on the way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.local import stack
from landfall.cli import build_parser
from landfall.commands.submit import code_request, publish, team_topic
from schemas.training_request import parse_training_request
from tests import iam_use
from tests.caches import clear_function_caches

from .conftest import OWN_IMAGE
from .test_chain import terminal_run

REGION = "europe-west4"
TEAM = "e2e-far"
MEMBER = "user:far-member@example.com"
REPO = Path(__file__).resolve().parents[2]
TEAMS = f"""schema_version = 1
unowned = "allow"

[[teams]]
name = "{TEAM}"
owns = [{{bucket = "*", prefix = "far/"}}]
monthly_budget_usd = 100.0
requests_topic = "landfall-requests-{TEAM}"
members = ["{MEMBER}"]
"""


@pytest.fixture(scope="module")
def far_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[stack.StackInfo]:
    state_dir = tmp_path_factory.mktemp("far")
    teams = state_dir / "teams.toml"
    teams.write_text(TEAMS)
    images = state_dir / "images.json"
    images.write_text(json.dumps({OWN_IMAGE: [sys.executable, str(Path(__file__).with_name("own_image_trainer.py"))]}))
    saved = dict(os.environ)
    os.environ.update(
        {
            stack.JOB_REGIONS_ENV: REGION,
            "LANDFALL_TEAMS_FILE": str(teams),
            "LANDFALL_CANARY_FIRST_RUNS": "0",
            stack.VERTEX_IMAGES_ENV: str(images),
        }
    )
    try:
        with stack.running_stack(state_dir, {name: 0 for name in stack.SERVICE_ORDER}) as info:
            os.environ.update(info.env)
            clear_function_caches()
            yield info
    finally:
        os.environ.clear()
        os.environ.update(saved)
        clear_function_caches()


def _published(argv: list[str]) -> str:
    """The team's request for argv (`landfall submit` flags), pinned to REGION, on the team's own topic; its run."""
    request = code_request(build_parser().parse_args(["submit", "--team", TEAM, *argv]))
    request.setdefault("constraints", {})["regions"] = [REGION]
    body = json.dumps(request).encode()
    publish(body, team_topic(TEAM))
    return parse_training_request(body).run_id


def test_a_teams_script_package_and_image_succeed_in_a_second_region(
    far_stack: stack.StackInfo, tmp_path: Path
) -> None:
    from google.cloud import firestore, storage

    env = far_stack.env
    buckets = dict(pair.split("=", 1) for pair in env["LANDFALL_ARTIFACT_BUCKETS"].split(","))
    assert set(buckets) == {"us-central1", REGION}
    client = storage.Client(project=env["GOOGLE_CLOUD_PROJECT"])
    landing = client.bucket(env["LANDFALL_LANDING_BUCKET"])
    rows = "".join(f"{i},{i % 5},{(3 * i) % 7}\n" for i in range(60))
    landing.blob("far/sales/part-0.csv").upload_from_string("a,b,y\n" + rows)
    data = f"gs://{landing.name}/far/sales/"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), "."],
        cwd=REPO / "examples" / "ddp_package", check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("ddp_example-*.whl")
    small = ["--data", data, "--params", "10"]
    runs = {
        "script": _published(["--script", str(REPO / "examples/ddp_script/train.py"), *small, "--arg=--epochs=2"]),
        "package": _published(["--package", str(wheel), "--module", "ddp_example.train", *small, "--arg=--epochs=2"]),
        "image": _published(["--image", OWN_IMAGE, *small, "--arg=--seconds=1"]),
    }
    firestore_runs = firestore.Client(project=env["GOOGLE_CLOUD_PROJECT"]).collection("runs")
    far = client.bucket(buckets[REGION])
    for form, run_id in runs.items():
        doc: dict[str, Any] = terminal_run(firestore_runs, run_id, timeout_s=420)
        assert doc["state"] == "SUCCEEDED", (form, doc.get("error"))
        assert doc["plan"]["region"] == REGION, (form, doc["plan"])
        assert doc["team"]["name"] == TEAM, form
        assert doc["artifacts"]["output_dir"].startswith(f"gs://{far.name}/runs/{TEAM}/{run_id}/"), (form, doc)
        outputs = [b.name for b in client.list_blobs(far, prefix=f"runs/{TEAM}/{run_id}/")]
        assert outputs, (form, "nothing written in the second region's bucket")
        if form != "image":
            assert f"runs/{TEAM}/{run_id}/data-files.jsonl" in outputs, (form, outputs)
    assert iam_use.refused_calls(far_stack.state_dir, env) == []


def test_a_member_uploads_code_to_the_teams_folder_only(far_stack: stack.StackInfo) -> None:
    """`landfall submit` run as a member of the team (LANDFALL_IDENTITY), as a shell of theirs would: its upload goes
    as the member, so code in the team's folder is theirs to upload and the run it starts SUCCEEDS; code anywhere
    else in the code bucket is refused with the 403 the cloud gives, and nothing is published."""
    from google.cloud import firestore

    env = {**os.environ, "LANDFALL_IDENTITY": MEMBER}
    landfall = str(Path(sys.executable).with_name("landfall"))
    data = f"gs://{far_stack.env['LANDFALL_LANDING_BUCKET']}/far/sales/"
    args = ["--script", str(REPO / "examples/ddp_script/train.py"), "--data", data, "--params", "10", "--json"]

    def submit(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [landfall, "submit", *extra, *args], env=env, capture_output=True, text=True, timeout=120, check=False
        )

    outside = submit()
    assert outside.returncode == 1, outside
    # its first call, looking for an upload it made already, is the one refused
    assert "far-member@example.com does not have storage.objects.get access" in outside.stderr, outside.stderr
    inside = submit("--team", TEAM)
    assert inside.returncode == 0, inside.stderr
    run_id = json.loads(inside.stdout)["run_id"]
    runs = firestore.Client(project=far_stack.env["GOOGLE_CLOUD_PROJECT"]).collection("runs")
    doc = terminal_run(runs, run_id, timeout_s=300)
    assert doc["state"] == "SUCCEEDED", doc.get("error")
    assert doc["request"]["trainer"]["script"].startswith(f"gs://{far_stack.env['LANDFALL_CODE_BUCKET']}/teams/{TEAM}/")
    # its publish went as the member, on the team's topic, which the member may publish to (the Pub/Sub gate)
    used = [json.loads(line) for line in (far_stack.state_dir / stack.IAM_RECORD).read_text().splitlines()]
    assert {
        "member": MEMBER,
        "permission": "pubsub.topics.publish",
        "allowed": True,
        "role": "roles/pubsub.publisher",
        "resource": f"landfall-requests-{TEAM}",
    } in used
    # the shared requests topic is not the member's: refused as Pub/Sub refuses it, and nothing is published
    shared = subprocess.run(
        [landfall, "submit", str(REPO / "schemas/examples/training_request.json")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shared.returncode == 1 and "User not authorized to perform this action" in shared.stderr, shared
