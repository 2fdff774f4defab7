"""`landfall plan REQUEST --custom-job --project P` prints the job P's deployed dispatcher would submit: the
image `landfall deploy` built (never the local stack's `:local`), P's artifacts bucket in the job's
region, the training service account and a gcloud line naming P, all read from the settings `landfall deploy`
records; with no such record it refuses, naming the settings and how to record them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from deploy.gcp.bundles import read_env_yaml, recorded_settings, settings_file
from landfall.cli import main
from tests.golden.dry_runs import SAMPLE

EXAMPLE = Path(__file__).parents[2] / "schemas/examples/training_request.json"
NOW = "2026-11-22T12:00:00+00:00"
P = SAMPLE.project
LOCAL_STACK = {
    "GOOGLE_CLOUD_PROJECT": "landfall-local",
    "LANDFALL_TRAINER_IMAGE": "us-central1-docker.pkg.dev/landfall-local/landfall/trainer:local",
    "LANDFALL_OUTPUT_BUCKET": "landfall-local-artifacts",
    "LANDFALL_ARTIFACT_BUCKETS": "us-central1=landfall-local-artifacts",
    "LANDFALL_DEFAULT_REGION": "us-central1",
}
"""What .landfall/env puts in a shell where the local stack runs: none of it may reach a job printed for P."""


@pytest.fixture
def local_stack_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LANDFALL_TRAINING_SERVICE_ACCOUNT", raising=False)
    for name, value in LOCAL_STACK.items():
        monkeypatch.setenv(name, value)


def deploy_dry_run(capsys: pytest.CaptureFixture[str], *extra: str) -> None:
    args = [
        "deploy",
        "--project",
        P,
        "--region",
        SAMPLE.region,
        "--image-tag",
        SAMPLE.image_tag,
        "--dry-run",
        "--no-ui",
    ]
    args += extra
    assert main(args) == 0
    capsys.readouterr()


def test_deploy_records_the_functions_settings_for_its_project(capsys: pytest.CaptureFixture[str]) -> None:
    deploy_dry_run(capsys, "--job-region", "europe-west4")
    recorded = recorded_settings(P)
    assert recorded is not None
    staged = Path(__file__).parents[2] / ".landfall/deploy/functions/dispatch.env.yaml"
    assert recorded == read_env_yaml(staged.read_text()), "the record is the deployed dispatcher's environment"


def test_the_custom_job_for_a_project_is_what_its_deployed_dispatcher_submits(
    local_stack_shell: None, capsys: pytest.CaptureFixture[str]
) -> None:
    deploy_dry_run(capsys, "--job-region", "europe-west4")
    assert main(["plan", str(EXAMPLE), "--custom-job", "--project", P, "--now", NOW]) == 0
    out = capsys.readouterr().out
    spec = yaml.safe_load(out)
    pool = spec["workerPoolSpecs"][0]
    command = next(line for line in out.splitlines() if line.startswith("#   gcloud ai custom-jobs create "))
    region = command.split("--region=")[1].split()[0]
    assert pool["containerSpec"]["imageUri"] == f"{region}-docker.pkg.dev/{P}/landfall/trainer:{SAMPLE.image_tag}"
    assert ":local" not in out and "landfall-local" not in out
    assert spec["baseOutputDirectory"]["outputUriPrefix"].startswith(f"gs://{P}-landfall-artifacts-{region}/")
    assert spec["serviceAccount"] == f"landfall-trainer@{P}.iam.gserviceaccount.com"
    assert f"--project={P}" in command


def test_json_for_a_project_carries_the_same_settings(
    local_stack_shell: None, capsys: pytest.CaptureFixture[str]
) -> None:
    deploy_dry_run(capsys)
    assert main(["plan", str(EXAMPLE), "--custom-job", "--project", P, "--format", "json", "--now", NOW]) == 0
    out = capsys.readouterr().out
    assert f"{P}/landfall/trainer:{SAMPLE.image_tag}" in out and f"landfall-trainer@{P}" in out


def test_a_project_with_no_recorded_deployment_is_refused_naming_what_is_needed(
    local_stack_shell: None, capsys: pytest.CaptureFixture[str]
) -> None:
    project = "never-deployed-here"
    assert not settings_file(project).exists()
    assert main(["plan", str(EXAMPLE), "--custom-job", "--project", project, "--now", NOW]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    for needed in ("LANDFALL_TRAINER_IMAGE", "LANDFALL_TRAINING_SERVICE_ACCOUNT", "LANDFALL_ARTIFACT_BUCKETS"):
        assert needed in captured.err
    assert f".landfall/deploy/projects/{project}.env.yaml" in captured.err
    assert f"landfall deploy --project {project}" in captured.err


def test_without_a_project_the_local_stacks_job_is_printed(
    local_stack_shell: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", str(EXAMPLE), "--custom-job", "--now", NOW]) == 0
    out = capsys.readouterr().out
    assert LOCAL_STACK["LANDFALL_TRAINER_IMAGE"] in out and "--project=" not in out


def test_a_team_s_job_for_a_project_is_not_printed_while_storage_points_at_the_local_emulator(
    local_stack_shell: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Its dataset listing would land on the emulator, not in P's buckets, and the printed job would fail at start."""
    golden = Path(__file__).parent / "golden/custom_jobs/own_script_two_nodes.request.json"
    own = tmp_path / "own.json"
    own.write_text(golden.read_text().replace("gs://acme-ml-landfall-code/", f"gs://{P}-landfall-code/"))
    deploy_dry_run(capsys)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:4443")
    assert main(["plan", str(own), "--custom-job", "--project", P, "--now", NOW]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "STORAGE_EMULATOR_HOST=http://127.0.0.1:4443" in err and f"gs://{P}-landfall-artifacts-" in err
