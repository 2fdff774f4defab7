"""A team's code is pinned when its run is planned: the run records each object's generation and digest, the job
(and its canary) fetch exactly that version whatever is uploaded to the path later, the model's lineage names it, and
code that is not there refuses the request before any plan."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from functions.dispatch import job_spec
from functions.records.model_registration import lineage
from landfall.words import code_text
from schemas.code_version import parse_code_objects
from schemas.run_record import RunState, parse_run_record
from schemas.training_request import parse_training_request
from tests.fakes.ingest import FakeObjects
from tests.fakes.world import PLAN, REQUEST, SETTINGS, World

SCRIPT = "gs://landfall-code/teams/growth/train.py"


def _world() -> tuple[World, FakeObjects]:
    world, objects = World(), FakeObjects()
    objects.put(REQUEST.dataset.uri.removeprefix("gs://landfall-landing/") + "part-0.csv", b"a,label\n1,0\n")
    world.dispatch_deps = replace(world.dispatch_deps, objects=objects)
    return world, objects


def _script_request(key: str) -> bytes:
    data: dict[str, Any] = {**REQUEST.to_dict(), "idempotency_key": key, "trainer": {"script": SCRIPT}}
    return parse_training_request(data).to_json()


def _script_env(job: dict[str, Any]) -> str:
    env = job["job_spec"]["worker_pool_specs"][0]["container_spec"]["env"]
    return str(next(e["value"] for e in env if e["name"] == "LANDFALL_TRAINER_SCRIPT"))


def test_the_run_trains_the_version_of_its_script_found_when_it_was_planned() -> None:
    world, objects = _world()
    first = objects.put("teams/growth/train.py", b"print('v1')\n")
    data = _script_request("pinned-1")
    world.deliver(data)
    run = world.run(parse_training_request(data).run_id)
    assert [(c.uri, c.generation, c.crc32c, c.size) for c in run.code] == [
        (SCRIPT, first.generation, first.crc32c, first.size)
    ]
    assert parse_run_record(run.to_dict()).code == run.code  # stored and read back
    objects.put("teams/growth/train.py", b"print('v2')\n")  # uploaded again while the run waits or restarts
    (job,) = world.vertex.jobs.values()
    env = {e.name: e.value for e in job.job_spec.worker_pool_specs[0].container_spec.env}
    assert env["LANDFALL_TRAINER_SCRIPT"] == f"{SCRIPT}#{first.generation}"
    assert lineage(run)["code"]["objects"] == [c.to_dict() for c in run.code]
    assert code_text(run) == f"script train.py, generation {first.generation}"
    canary = job_spec.canary_job(parse_training_request(data), PLAN, SETTINGS, run.run_id, pins={SCRIPT: "X#1"})
    assert _script_env(canary) == "X#1"


def test_code_that_is_not_there_refuses_the_request_before_any_plan() -> None:
    world, _ = _world()
    data = _script_request("missing-1")
    world.deliver(data)
    run = world.run(parse_training_request(data).run_id)
    assert run.state == RunState.REJECTED and run.error is not None
    assert f"{SCRIPT} does not exist (any more): upload it again" in run.error.message
    assert world.planned == []


def test_a_stored_code_list_is_checked() -> None:
    import pytest

    from schemas.errors import SchemaError

    with pytest.raises(SchemaError, match="numeric generation"):
        parse_code_objects([{"uri": SCRIPT, "generation": "abc"}])
    with pytest.raises(SchemaError, match="at most 64"):
        parse_code_objects([{"uri": SCRIPT, "generation": "1"}] * 65)
    assert json.loads(json.dumps([c.to_dict() for c in parse_code_objects([])])) == []


def test_the_lineage_of_a_team_s_code_keeps_only_the_hyperparameters_it_was_given_and_its_packages() -> None:
    world, objects = _world()
    objects.put("teams/growth/train.py", b"print('v1')\n")
    data = {**json.loads(_script_request("given-1")), "hyperparameters": {"learning_rate": 0.003}}
    world.deliver(json.dumps(data).encode())
    run = world.run(parse_training_request(data).run_id)
    run = replace(run, metrics={"packages": {"torch": "2.13.0", "pandas": "2.2.3"}})
    kept = lineage(run)
    assert kept["request"]["hyperparameters"] == {"learning_rate": 0.003}  # not epochs 5, batch 64 it never read
    assert kept["code"]["packages"] == {"torch": "2.13.0", "pandas": "2.2.3"}
    builtin = lineage(replace(run, request={k: v for k, v in run.request.items() if k != "trainer"}))
    assert builtin["request"]["hyperparameters"]["epochs"] == 5  # the built-in trainer trains with every one


def test_a_pinned_version_that_is_gone_says_it_was_replaced_and_what_to_do() -> None:
    from trainer.user_code import fetch_failure

    said = fetch_failure(f"{SCRIPT}#1764", FileNotFoundError("404"))
    assert f"cannot fetch {SCRIPT} at generation 1764, the version this run was planned with" in said
    assert "`landfall retry` the run" in said and "object versioning" in said
    assert fetch_failure(SCRIPT, FileNotFoundError("404")).endswith(
        "upload it to the code bucket (landfall submit does)"
    )
