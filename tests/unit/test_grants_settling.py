"""A refused permission right after a deploy is a grant still on its way (Google: typically 2 minutes, sometimes 7 or
more) and is retried; later it is a grant that is missing, and the run and the log say which permission to grant."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from deploy.gcp.plan import function_env, names
from functions import main
from functions.errors import MissingPermission, TransientError, as_transient, denied_permission
from functions.settings import SettingsError, settings_from_env
from schemas.run_record import RunState
from schemas.times import format_timestamp
from tests.fakes.world import NOW, RUN_ID, SETTINGS, World

VERTEX_403 = (
    "Permission 'aiplatform.customJobs.create' denied on resource '//aiplatform.googleapis.com/projects/p/locations/"
    "us-central1' (or it may not exist)."
)
STORAGE_403 = (
    "landfall-dispatch@p.iam.gserviceaccount.com does not have storage.objects.create access to the Google Cloud "
    "Storage object. Permission 'storage.objects.create' denied on resource (or it may not exist)."
)


def test_a_403_names_the_permission_to_grant() -> None:
    assert denied_permission(VERTEX_403) == "aiplatform.customJobs.create"
    assert denied_permission(STORAGE_403) == "storage.objects.create"
    assert denied_permission("does not have storage.buckets.get access to the bucket") == "storage.buckets.get"
    assert denied_permission("The caller does not have permission") == ""
    refused = as_transient(gexc.Forbidden(STORAGE_403), "writing gs://b/runs/r/data-files.jsonl")
    assert isinstance(refused, MissingPermission) and refused.permission == "storage.objects.create"
    assert "grant storage.objects.create" in str(refused) and "writing gs://b/runs/r/data-files.jsonl" in str(refused)


def test_grants_settle_for_a_while_after_a_deploy_and_never_without_one() -> None:
    deployed = settings_from_env({"GOOGLE_CLOUD_PROJECT": "p", "LANDFALL_DEPLOYED_AT": format_timestamp(NOW)})
    assert deployed.grants_settling(NOW + timedelta(minutes=7))
    assert not deployed.grants_settling(NOW + timedelta(seconds=deployed.grants_settle_seconds))
    assert not SETTINGS.grants_settling(NOW)  # the local stack: nothing was deployed
    with pytest.raises(SettingsError, match="LANDFALL_DEPLOYED_AT must be an RFC 3339 time"):
        settings_from_env({"GOOGLE_CLOUD_PROJECT": "p", "LANDFALL_DEPLOYED_AT": "yesterday"})


def test_landfall_deploy_stamps_every_function_with_the_time_it_was_staged() -> None:
    from tests.unit.test_deploy_plan import SAMPLE

    env = function_env(names(SAMPLE), "image", deployed_at=format_timestamp(NOW))
    assert settings_from_env(env).deployed_at == NOW


def _vertex_refuses_a_permission(minutes_after_deploy: float) -> World:
    world = World()
    deployed = replace(SETTINGS, deployed_at=NOW - timedelta(minutes=minutes_after_deploy))
    world.dispatch_deps = replace(world.dispatch_deps, settings=deployed)
    world.vertex.refuse("us-central1", gexc.PermissionDenied(VERTEX_403))
    return world


def test_a_job_refused_a_permission_minutes_after_the_deploy_is_retried_then_created() -> None:
    world = _vertex_refuses_a_permission(3)
    with pytest.raises(TransientError, match=r"aiplatform\.customJobs\.create"):
        world.deliver()
    assert world.run().state == RunState.SUBMITTING  # the claim given back: the redelivery goes on
    assert world.deliver(message_id="m-2") == "submitted"
    assert world.run().state == RunState.SUBMITTED and len(world.vertex.jobs) == 1


def test_a_job_refused_a_permission_long_after_the_deploy_fails_naming_it() -> None:
    world = _vertex_refuses_a_permission(45)
    assert world.deliver() == "failed:submit-refused"
    run = world.run(RUN_ID)
    assert run.state == RunState.FAILED and run.error is not None
    assert "grant aiplatform.customJobs.create" in run.error.message


def test_an_entry_point_retries_a_refused_permission_only_while_grants_settle(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused() -> str:
        raise MissingPermission("reading gs://b/o was refused", "storage.objects.get")

    event: Any = {"id": "1"}
    monkeypatch.setattr(main, "_grants_settling", lambda: True)
    with pytest.raises(TransientError):
        main._run("on_object_finalized", event, refused)
    monkeypatch.setattr(main, "_grants_settling", lambda: False)
    main._run("on_object_finalized", event, refused)  # acknowledged (no raise), logged with the permission
