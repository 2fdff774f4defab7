"""Plans, fallbacks and canaries stay in the deployment's job regions (where an artifacts bucket and an image
repository are deployed); a request that allows none of them is REJECTED, by the dispatcher and by `landfall plan`
alike, naming the deploy command that adds its region."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from unittest import mock

import pytest

from functions import wiring
from functions.dispatch.job_spec import artifacts, canary_job, custom_job
from functions.dispatch.planner_config import planner_config
from functions.planning import PlanInput, PlannerConfig, PlanOutcome, plan_input_from_request, plan_request
from functions.planning.job_regions import undeployed_rejection
from functions.planning.risk import NO_HISTORY
from functions.settings import Settings, settings_from_env
from landfall.commands.planning import register
from schemas.training_request import TrainingRequest, parse_training_request
from tests.fakes.world import REQUEST_JSON, World

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
PROJECT = "acme-ml"
US_BUCKET = f"{PROJECT}-landfall-artifacts-us-central1"
EU_BUCKET = f"{PROJECT}-landfall-artifacts-europe-west4"
US_ONLY = {
    "GOOGLE_CLOUD_PROJECT": PROJECT,
    "LANDFALL_LANDING_BUCKET": "landfall-landing",
    "LANDFALL_TRAINER_IMAGE": f"us-central1-docker.pkg.dev/{PROJECT}/landfall/trainer:t1",
    "LANDFALL_ARTIFACT_BUCKETS": f"us-central1={US_BUCKET}",
}
US_AND_EU = {**US_ONLY, "LANDFALL_ARTIFACT_BUCKETS": f"us-central1={US_BUCKET},europe-west4={EU_BUCKET}"}
EU_AND_ASIA = {
    **US_ONLY,
    "LANDFALL_DEFAULT_REGION": "europe-west4",
    "LANDFALL_ARTIFACT_BUCKETS": f"europe-west4={EU_BUCKET},asia-southeast1={PROJECT}-landfall-artifacts-asia",
}
FIX = f"`landfall deploy --project {PROJECT} --region us-central1 --job-region europe-west4`"
LM = PlanInput(task="causal-lm", preset="gpt-1.3b", dataset_bytes=10**10, batch_size=64)
"""Eight H100s' worth of training: the catalog sells such machines in many regions, at different prices."""


def request_in(*regions: str) -> TrainingRequest:
    raw = json.loads(REQUEST_JSON)
    raw["constraints"]["regions"] = list(regions)
    return parse_training_request(json.dumps(raw))


def planned(request: TrainingRequest, settings: Settings) -> PlanOutcome:
    return plan_request(plan_input_from_request(request), planner_config(settings), now=NOW)


def dispatched(request: TrainingRequest, settings: Settings) -> World:
    """One delivery of request to the dispatcher, planning with the real planner under settings."""
    world = World()
    world.dispatch_deps = dataclasses.replace(
        world.dispatch_deps, settings=settings, plan=lambda r: planned(r, settings)
    )
    world.deliver(json.dumps(request.to_dict()).encode())
    return world


def places(outcome: PlanOutcome) -> list[str]:
    assert outcome.plan is not None, outcome.rejection
    return [outcome.plan.region, *(f.region for f in outcome.fallbacks)]


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith("LANDFALL_") and k != "GOOGLE_CLOUD_PROJECT"}
    with mock.patch.dict(os.environ, {**kept, **env}, clear=True):
        yield


def cli_plan(request: TrainingRequest, env: dict[str, str], tmp_path: Path, *flags: str) -> tuple[int, str, str]:
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request.to_dict()))
    parser = argparse.ArgumentParser(prog="landfall")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["plan", str(path), "--now", NOW.isoformat(), *flags])
    out, err = io.StringIO(), io.StringIO()
    with environment(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = args.func(args)
    return code, out.getvalue(), err.getvalue()


def test_an_eu_only_request_without_an_eu_deployment_is_rejected_naming_the_deploy_command(tmp_path: Path) -> None:
    request = request_in("europe-west4")
    world = dispatched(request, settings_from_env(US_ONLY))
    run = world.run(request.run_id)
    assert run.state.value == "REJECTED" and run.plan is None
    assert world.vertex.create_calls == []
    assert run.error is not None and run.error.code == "infeasible"
    message = run.error.message
    assert "allows only europe-west4" in message, "the regions it allowed"
    assert "only in us-central1" in message, "the regions deployed"
    assert FIX in message
    code, out, _ = cli_plan(request, US_ONLY, tmp_path)
    assert code == 1 and out.endswith(f"\nREJECTED: {message}\n"), "landfall plan refuses it the same way"
    code, _, err = cli_plan(request, US_ONLY, tmp_path, "--custom-job", "--format", "json")
    assert code == 1 and err == f"REJECTED: {message}\n"


def test_with_europe_deployed_the_plan_every_fallback_and_every_output_stay_in_europe() -> None:
    settings = settings_from_env(US_AND_EU)
    request = request_in("europe-west4")
    outcome = planned(request, settings)
    assert outcome.fallbacks, "a fallback to check"
    assert set(places(outcome)) == {"europe-west4"}
    run = request.run_id
    base = f"gs://{EU_BUCKET}/runs/{run}/"
    assert outcome.plan is not None
    for plan in (outcome.plan, *outcome.fallbacks):
        job = custom_job(request, plan, settings, run)
        assert job["job_spec"]["base_output_directory"] == {"output_uri_prefix": base}
        image = job["job_spec"]["worker_pool_specs"][0]["container_spec"]["image_uri"]
        assert image.startswith(f"europe-west4-docker.pkg.dev/{PROJECT}/landfall/"), image
        canary = canary_job(request, plan, settings, run)
        assert canary["job_spec"]["base_output_directory"] == {"output_uri_prefix": f"{base}canary/"}
    # What Vertex sets AIP_MODEL_DIR, AIP_CHECKPOINT_DIR and AIP_TENSORBOARD_LOG_DIR to for that base directory.
    assert artifacts(settings, run, outcome.plan.region) == {
        "output_dir": f"gs://{EU_BUCKET}/runs/{run}/",
        "model_dir": f"gs://{EU_BUCKET}/runs/{run}/model/",
        "checkpoint_dir": f"gs://{EU_BUCKET}/runs/{run}/checkpoints/",
        "tensorboard_dir": f"gs://{EU_BUCKET}/runs/{run}/logs/",
    }
    world = dispatched(request, settings)
    created = world.vertex.create_calls
    assert created, "the dispatcher submitted the run"
    stored = world.run(run)
    assert stored.plan is not None and stored.plan.region == "europe-west4"
    assert {f.region for f in stored.submission.fallbacks or ()} <= {"europe-west4"}


def test_a_request_allowing_any_region_never_leaves_the_job_regions() -> None:
    settings = settings_from_env(EU_AND_ASIA)
    assert settings.job_regions == ("europe-west4", "asia-southeast1")
    config = planner_config(settings)
    anywhere = plan_request(LM, dataclasses.replace(config, job_regions=(), max_fallbacks=8), now=NOW)
    assert set(places(anywhere)) - set(settings.job_regions), "without the rule, plans would leave the job regions"
    kept = plan_request(LM, dataclasses.replace(config, max_fallbacks=8), now=NOW)
    assert kept.fallbacks and set(places(kept)) <= set(settings.job_regions)


def test_the_dispatcher_s_planner_takes_the_settings_job_regions(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = settings_from_env(EU_AND_ASIA)
    monkeypatch.setattr(wiring, "get_settings", lambda: settings)
    monkeypatch.setattr(wiring, "_measured", lambda request: [])  # no measurements: Firestore is not reached here
    monkeypatch.setattr(wiring, "_capacity_history", lambda: NO_HISTORY)  # nor for capacity
    wiring.dispatcher_planner_config.cache_clear()
    try:
        assert wiring.dispatcher_planner_config().job_regions == settings.job_regions
        raw = json.loads(REQUEST_JSON)
        raw.update(task="causal-lm", model={"preset": "gpt-1.3b", "label_column": "label"})
        raw["constraints"].update(regions=[], gpu_allowlist=["NVIDIA_H100_80GB", "NVIDIA_B200"])
        request = parse_training_request(json.dumps(raw))
        anywhere = plan_request(plan_input_from_request(request), PlannerConfig(), now=NOW)
        assert set(places(anywhere)) - set(settings.job_regions), "without the rule, plans would leave them"
        assert set(places(wiring._plan(request))) <= set(settings.job_regions)
    finally:
        wiring.dispatcher_planner_config.cache_clear()


@pytest.mark.parametrize(
    ("allowed", "deployed", "expected"),
    [
        ((), ("us-central1",), None),
        (("europe-west4",), (), None),
        (("europe-west4", "us-central1"), ("us-central1",), None),
        (("europe-south9",), ("us-central1",), None),
        (
            ("europe-west4", "europe-south9"),
            ("us-central1", "asia-east1"),
            "--region us-central1 --job-region asia-east1 --job-region europe-west4`",
        ),
    ],
)
def test_the_rejection_names_the_known_regions_to_deploy_and_keeps_the_deployed_ones(
    allowed: tuple[str, ...], deployed: tuple[str, ...], expected: str | None
) -> None:
    text = undeployed_rejection(
        allowed,
        deployed,
        catalog_regions=("us-central1", "europe-west4", "asia-east1"),
        default_region="us-central1",
        project=PROJECT,
    )
    if expected is None:
        assert text is None
    else:
        assert text is not None and text.endswith(f"{expected}, or allow a deployed region in constraints.regions")
