"""Bring your own training code through the whole local stack: a torchrun-style script that knows
nothing of Landfall, dropped with `landfall submit --script`, runs on 2 nodes x 2 processes and ends SUCCEEDED with
its metrics on the run and its model in the run's model folder; a running script is cancelled. The same script as an
installable package (`--package`), as a folder whose entry point imports its sibling (`--script DIR`) and in the
example container (`--image`, mapped by the stack's Vertex emulator as examples/container/images.json says); failing
scripts end FAILED with their reason, and `landfall retry` makes a new run of the same code."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from deploy.local import stack
from landfall.cli import build_parser
from schemas.run_record import RunState
from tests import refused_requests
from tests.polling import wait_for

from .test_chain import terminal_run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PREFIX = "byoc/lines/"  # under no route: only the submitted request trains on it


def submit(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    args: argparse.Namespace = build_parser().parse_args(["submit", *argv, "--json"])
    assert args.func(args) == 0
    return str(json.loads(capsys.readouterr().out)["run_id"])


def test_a_submitted_script_trains_on_two_nodes_of_two_processes_and_a_running_one_is_cancelled(
    local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = "".join(f"{i},{i % 7},{2 * i - 3}\n" for i in range(80))
    landing_bucket.blob(PREFIX + "part-0.csv").upload_from_string("a,b,y\n" + rows, content_type="text/csv")
    data = f"gs://{landing_bucket.name}/{PREFIX}"
    pins = ("--params", "10", "--machine-type", "g2-standard-24", "--gpus", "2", "--nodes", "2", "--batch-size", "8")
    run_id = submit(capsys, "--script", str(EXAMPLES / "ddp_script" / "train.py"), "--data", data, *pins,
                    "--arg=--epochs", "--arg=3")  # fmt: skip
    doc = terminal_run(firestore_runs, run_id, timeout_s=420)
    assert doc["state"] == "SUCCEEDED", doc.get("error")
    assert doc["request"]["trainer"]["script"].startswith(f"gs://{local_stack.env['LANDFALL_CODE_BUCKET']}/scripts/")
    metrics = doc["metrics"]
    assert (metrics["trainer"], metrics["world_size"], metrics["final"]["world_size"], metrics["steps"]) == (
        "script",
        4,
        4,
        3,
    )
    assert [p["step"] for p in metrics["loss_curve"]] == [1, 2, 3]
    bucket, _, folder = doc["artifacts"]["model_dir"].removeprefix("gs://").partition("/")
    assert landing_bucket.client.bucket(bucket).blob(folder + "model.pt").exists()

    running = submit(capsys, "--script", str(EXAMPLES / "failing" / "sleeps.py"), "--data", data, "--params", "10")

    def state() -> str | None:
        snap = firestore_runs.document(running).get()
        return snap.to_dict()["state"] if snap.exists and snap.to_dict()["state"] == "RUNNING" else None

    wait_for(state, 240, f"run {running} to be RUNNING")
    args = build_parser().parse_args(["cancel", running])
    assert args.func(args) == 0
    ended = terminal_run(firestore_runs, running, timeout_s=120)
    assert ended["state"] == RunState.CANCELLED.value, ended.get("error")


def lines_dataset(landing_bucket: Any, prefix: str) -> str:
    rows = "".join(f"{i},{i % 7},{2 * i - 3}\n" for i in range(80))
    landing_bucket.blob(prefix + "part-0.csv").upload_from_string("a,b,y\n" + rows, content_type="text/csv")
    return f"gs://{landing_bucket.name}/{prefix}"


def assert_trained(doc: dict[str, Any], landing_bucket: Any, form: str, world_size: int) -> None:
    assert doc["state"] == "SUCCEEDED", doc.get("error")
    metrics = doc["metrics"]
    assert (metrics["trainer"], metrics["final"]["world_size"], metrics["steps"]) == (form, world_size, 3), metrics
    assert [p["step"] for p in metrics["loss_curve"]] == [1, 2, 3]
    bucket, _, folder = doc["artifacts"]["model_dir"].removeprefix("gs://").partition("/")
    assert landing_bucket.client.bucket(bucket).blob(folder + "model.pt").exists()


def test_the_same_script_as_a_package_and_in_a_container_trains_through_the_stack(
    local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any, capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:  # fmt: skip
    data = lines_dataset(landing_bucket, "byoc/forms/")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), "."],
        cwd=EXAMPLES / "ddp_package", check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("ddp_example-*.whl")
    pins = ("--params", "10", "--machine-type", "g2-standard-24", "--gpus", "2", "--nodes", "2", "--batch-size", "8")
    epochs = ("--arg=--epochs", "--arg=3")
    package = submit(capsys, "--package", str(wheel), "--module", "ddp_example.train", "--data", data, *pins, *epochs)
    (image,) = json.loads((EXAMPLES / "container" / "images.json").read_text())
    container = submit(capsys, "--image", image, "--data", data, *pins, *epochs)
    # a folder whose main.py imports its sibling module, packed and uploaded by submit --script DIR
    folder = submit(capsys, "--script", str(EXAMPLES / "ddp_folder"), "--data", data, *pins, *epochs)
    doc = terminal_run(firestore_runs, package, timeout_s=420)
    assert_trained(doc, landing_bucket, "package", world_size=4)  # 2 nodes x 2 processes, started by the launcher
    assert doc["request"]["trainer"]["package_uris"][0].startswith(f"gs://{local_stack.env['LANDFALL_CODE_BUCKET']}/")
    doc = terminal_run(firestore_runs, container, timeout_s=420)
    # Vertex starts the container once per node, and its entrypoint starts torchrun there: 2 nodes x 2 processes
    assert_trained(doc, landing_bucket, "image", world_size=4)
    assert doc["request"]["trainer"]["image_uri"] == image
    doc = terminal_run(firestore_runs, folder, timeout_s=420)
    assert_trained(doc, landing_bucket, "script", world_size=4)
    assert doc["request"]["trainer"]["script"].endswith("/ddp_folder.pyz")


def test_failing_scripts_end_failed_with_their_reason_and_line_on_the_run(
    local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any, capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:  # fmt: skip
    landing_bucket.blob("byoc/failing/part-0.csv").upload_from_string("a,y\n1,2\n", content_type="text/csv")
    data = f"gs://{landing_bucket.name}/byoc/failing/"
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("landfall-no-such-package-anywhere==9.9.9\n")
    failing = EXAMPLES / "failing"
    cases = {
        "out-of-memory": (failing / "exhaust_memory.py", (), "CUDA out of memory"),
        "user-code": (failing / "exit_one.py", (), "loss went to nan"),
        "bad-config": (failing / "exit_one.py", ("--requirements", str(requirements)), "landfall-no-such-package"),
    }
    runs = {
        reason: submit(capsys, "--script", str(script), "--data", data, "--params", "10", *extra)
        for reason, (script, extra, _) in cases.items()
    }
    for reason, run_id in runs.items():
        doc = terminal_run(firestore_runs, run_id, timeout_s=300)
        assert doc["state"] == "FAILED", doc
        assert doc["error"]["reason"] == reason and cases[reason][2] in doc["error"]["message"], doc["error"]
    # `landfall retry` of a failed run of user code: one new run of the same code (a second retry starts nothing)
    args = build_parser().parse_args(["retry", runs["user-code"], "--json"])
    assert args.func(args) == 0
    retried = json.loads(capsys.readouterr().out)
    assert retried["retry_of"] == runs["user-code"] and retried["run_id"] != runs["user-code"]
    args = build_parser().parse_args(["retry", runs["user-code"], "--json"])
    assert args.func(args) == 0 and json.loads(capsys.readouterr().out)["already_retried"] is True
    again = terminal_run(firestore_runs, retried["run_id"], timeout_s=300)
    first = firestore_runs.document(runs["user-code"]).get().to_dict()
    assert again["request"]["trainer"] == first["request"]["trainer"]
    assert (again["state"], again["error"]["reason"]) == ("FAILED", "user-code"), again.get("error")


def published(local_stack: stack.StackInfo, request: dict[str, Any]) -> str:
    """request (with its idempotency_key) published on the requests topic as a team would (no CLI in between); its
    run id, which names the run even when the request is one the schema refuses."""
    from google.cloud import pubsub_v1

    from schemas.training_request import run_id_for

    topic = f"projects/{local_stack.env['GOOGLE_CLOUD_PROJECT']}/topics/landfall-training-requests"
    pubsub_v1.PublisherClient().publish(topic, json.dumps(request).encode()).result(timeout=30)
    return run_id_for(request["idempotency_key"])


def test_code_breaking_a_rule_and_datasets_that_cannot_train_are_rejected_without_a_job(
    local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any
) -> None:
    from functions.gcp.vertex import RUN_LABEL
    from functions.planning.catalog import load_catalog
    from functions.wiring import vertex_jobs

    data = lines_dataset(landing_bucket, "byoc/refused/")
    landing_bucket.blob("byoc/empty/_SUCCESS").upload_from_string(b"")  # a marker, no data
    landing_bucket.blob("byoc/table/part-0.csv").upload_from_string("tenure,plan\n1,a\n2,b\n")
    code = local_stack.env["LANDFALL_CODE_BUCKET"]
    size = {"workload": {"parameters": 10}}
    cases: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {  # case -> (request, what error.message must say)
        "image": ({"trainer": {"image_uri": "docker.io/someone/miner:1"}, **size}, ("not under an allowed image",)),
        "script": ({"trainer": {"script": f"gs://{landing_bucket.name}/x/t.py"}, **size}, ("outside the code bucket",)),
        "size": ({"trainer": {"script": f"gs://{code}/scripts/train.py"}}, ("four ways",)),
        "empty-dataset": (
            {"dataset": {"uri": f"gs://{landing_bucket.name}/byoc/empty/"}, "trainer": {"script": f"gs://{code}/t.py"},
             **size},
            ("holds no data objects",),
        ),
        "missing-label-column": (
            {"dataset": {"uri": f"gs://{landing_bucket.name}/byoc/table/"}, "task": "tabular-classification",
             "model": {"preset": "mlp-small", "label_column": "churned"}},
            ("'tenure', 'plan'",),
        ),
        # URIs that name another place than they seem, requirement lines that are options or URLs, a command on an
        # image the deployment does not own, mistyped fields and Landfall's labels: all published at once
        **refused_requests.cases(code, landing_bucket.name),
    }  # fmt: skip
    runs = {
        case: published(local_stack, {"idempotency_key": f"refused-{case}", "dataset": {"uri": data}, **request})
        for case, (request, _) in cases.items()
    }
    for case, run_id in runs.items():
        doc = terminal_run(firestore_runs, run_id, timeout_s=120)
        assert doc["state"] == RunState.REJECTED.value, (case, doc)
        assert all(part in doc["error"]["message"] for part in cases[case][1]), (case, doc["error"])
        assert not doc.get("vertex") and not (doc.get("submission") or {}).get("jobs"), (case, doc)
    refused = set(runs.values())
    labelled = [j for r in load_catalog().regions for j in vertex_jobs().list_labelled(r)]
    assert not [j.name for j in labelled if j.labels.get(RUN_LABEL) in refused]
