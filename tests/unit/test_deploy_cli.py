"""`landfall deploy` / `landfall teardown` from the command line: the dry runs print the golden scripts, and a dry
run without what it needs says what to pass."""

from __future__ import annotations

import pytest

from landfall.cli import main
from tests.golden.dry_runs import GOLDEN_DIR, SAMPLE

SAMPLE_ARGS = [
    "--project",
    SAMPLE.project,
    "--region",
    SAMPLE.region,
    "--project-number",
    SAMPLE.project_number,
    "--job-region",
    "europe-west4",
]
UI_ARGS = ["--ui-users", "group:ml-team@example.com,user:ana@example.com"]


def test_deploy_dry_run_prints_the_golden_script(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", *SAMPLE_ARGS, *UI_ARGS, "--image-tag", SAMPLE.image_tag, "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert out == (GOLDEN_DIR / "deploy_dry_run.sh").read_text()
    assert "staged 5 function bundles, the trainer context and the dashboard's context" in err


def test_teardown_dry_run_prints_the_golden_script(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["teardown", *SAMPLE_ARGS, "--dry-run"]) == 0
    assert capsys.readouterr().out == (GOLDEN_DIR / "teardown_dry_run.sh").read_text()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["teardown", "--project", "Bad_Project", "--project-number", "1", "--dry-run"], "is not a project id"),
        (["deploy", "--project", "landfall-sample", "--project-number", "12ab", "--dry-run"], "must be digits"),
    ],
)
def test_a_dry_run_without_what_it_needs_says_what_to_pass(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and says in err


def test_a_dry_run_needs_no_project_number(capsys: pytest.CaptureFixture[str]) -> None:
    """The Google-managed identities are printed with PROJECT_NUMBER; the number is looked up only when deploying."""
    args = ["--project", SAMPLE.project, "--region", SAMPLE.region, "--job-region", "europe-west4", *UI_ARGS]
    assert main(["deploy", *args, "--image-tag", SAMPLE.image_tag, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "--member=serviceAccount:service-PROJECT_NUMBER@gcp-sa-pubsub.iam.gserviceaccount.com" in out
    assert "service-123456789012" not in out
    assert out.replace("PROJECT_NUMBER", SAMPLE.project_number) == (GOLDEN_DIR / "deploy_dry_run.sh").read_text()


def test_a_dry_run_from_a_fresh_shell_needs_no_function_settings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user's shell has no GOOGLE_CLOUD_PROJECT or LANDFALL_* variables: deploy reads the shipped routes file, not
    the functions' settings (it used to end in a SettingsError traceback)."""
    from functions.ingest.routes import load_routes
    from functions.settings import get_settings

    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    monkeypatch.setenv("LANDFALL_ROUTES_FILE", "/nonexistent/routes.toml")
    get_settings.cache_clear()
    load_routes.cache_clear()
    try:
        assert main(["deploy", *SAMPLE_ARGS, *UI_ARGS, "--image-tag", SAMPLE.image_tag, "--dry-run"]) == 0
        assert capsys.readouterr().out == (GOLDEN_DIR / "deploy_dry_run.sh").read_text()
    finally:
        get_settings.cache_clear()
        load_routes.cache_clear()
