"""A retry goes on from its line's checkpoints: the request names the line's first run (checkpoint_lineage), every
retry of the line writes to that run's folder, `--from-scratch` starts a new line, and a canary never touches it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from functions.dispatch.job_spec import canary_job, custom_job, lineage_checkpoints
from functions.records.retries import retry_request
from schemas.errors import SchemaError
from schemas.run_record import RunRecord, RunState
from schemas.trainer_spec import CHECKPOINT_DIR_ENV
from schemas.training_request import TrainingRequest, parse_training_request
from tests.fakes.world import PLAN, REQUEST, SETTINGS, World

NOW = datetime(2026, 11, 28, tzinfo=UTC)


def _env(job: dict[str, object]) -> dict[str, str]:
    spec = job["job_spec"]["worker_pool_specs"][0]["container_spec"]  # type: ignore[index]
    return {e["name"]: e["value"] for e in spec["env"]}


def _ended(request: TrainingRequest, run_id: str) -> RunRecord:
    world = World()
    world.deliver()
    return replace(world.run(), run_id=run_id, request=request.to_dict(), state=RunState.FAILED)


def test_every_retry_of_a_line_resumes_from_its_first_run_s_folder_and_from_scratch_starts_a_new_line() -> None:
    first = _ended(REQUEST, REQUEST.run_id)
    retry = retry_request(first, NOW)
    assert (retry.retry_of, retry.checkpoint_lineage) == (REQUEST.run_id, REQUEST.run_id)
    again = retry_request(_ended(retry, retry.run_id), NOW)
    assert (again.retry_of, again.checkpoint_lineage) == (retry.run_id, REQUEST.run_id)
    scratch = retry_request(_ended(retry, retry.run_id), NOW, from_scratch=True)
    assert scratch.checkpoint_lineage == "" and scratch.retry_of == retry.run_id
    after = retry_request(_ended(scratch, scratch.run_id), NOW)
    assert after.checkpoint_lineage == scratch.run_id  # the scratch run began a line of its own

    folder = lineage_checkpoints(again, SETTINGS, PLAN.region)
    assert folder.endswith(f"runs/{REQUEST.run_id}/checkpoints/") and folder.startswith("gs://")
    assert _env(custom_job(again, PLAN, SETTINGS, again.run_id))[CHECKPOINT_DIR_ENV] == folder
    assert CHECKPOINT_DIR_ENV not in _env(custom_job(REQUEST, PLAN, SETTINGS, REQUEST.run_id))  # AIP_CHECKPOINT_DIR
    assert CHECKPOINT_DIR_ENV not in _env(canary_job(again, PLAN, SETTINGS, again.run_id))


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"checkpoint_lineage": "run-0a1b2c3d4e5f60718293"}, "set retry_of too"),
        ({"checkpoint_lineage": "../other-team", "retry_of": "run-1"}, "is not a run id"),
        ({"checkpoint_lineage": "Run/1", "retry_of": "run-1"}, "is not a run id"),
    ],
)
def test_a_lineage_names_a_run_and_only_on_a_retry(changes: dict[str, str], expected: str) -> None:
    with pytest.raises(SchemaError, match=expected):
        parse_training_request({**REQUEST.to_dict(), **changes})
