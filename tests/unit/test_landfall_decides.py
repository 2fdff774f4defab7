"""What only Landfall decides: its own job labels (kept within Vertex's 64, never a request's), the canary lookup by
them, the registry model and rule of a run (from the route that owns the data), no registration without a model, and
promotions of one model decided one at a time against production as it is when the alias moves."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from deploy.routes import read_routes
from functions.dispatch.job_spec import canary_job, custom_job, job_labels, label_warnings
from functions.gcp.vertex import is_canary_job
from functions.records.model_registration import NO_MODEL, decide, holds_a_model, target_for
from functions.records.promotion_leases import given_back, taken
from schemas.job_view import RUN_LABEL, JobView
from schemas.model_version import VersionView
from schemas.request_labels import LANDFALL_LABEL, VERTEX_MAX_LABELS
from schemas.times import format_timestamp
from tests.fakes.models import FakePromotions, FakeRegistry
from tests.fakes.runs import FakeRuns
from tests.fakes.world import NOW, PLAN, REQUEST, SETTINGS
from tests.unit.test_model_registration import MODEL_ID, RULE, champion_name, register, succeeded

HOSTILE = {"landfall-phase": "canary", "landfall-run-id": "someone-else", "landfall-route": "regression"}
MANY = {f"team-{i:02d}": "x" for i in range(65)}


@pytest.mark.parametrize("labels", [HOSTILE, MANY, {**MANY, **HOSTILE}], ids=["landfalls", "65", "both"])
def test_landfalls_labels_are_set_by_landfall_alone_and_kept_within_vertexs_limit(labels: dict[str, str]) -> None:
    request = replace(REQUEST, labels=labels)  # built directly: parse_training_request refuses these
    long = custom_job(request, PLAN, SETTINGS, "run-1")["labels"]
    canary = canary_job(request, PLAN, SETTINGS, "run-1")["labels"]
    for job in (long, canary):
        assert len(job) <= VERTEX_MAX_LABELS
        assert job[RUN_LABEL] == "run-1" and job[LANDFALL_LABEL] == "run"
        assert "landfall-route" not in job, "the route is the data's, never a request's"
    assert not is_canary_job(_view(long)) and is_canary_job(_view(canary))
    assert label_warnings(labels), "the run says what was left off"
    assert job_labels(replace(REQUEST, labels={"team": "a"}), "run-1") == {
        "landfall": "run",
        RUN_LABEL: "run-1",
        "team": "a",
    }
    assert label_warnings({"team": "a"}) == []
    # the route label ingest writes on every request it makes (checked against the data) is not news to the run
    assert label_warnings({"landfall-route": "default-tabular", "team": "a"}) == []


def _view(labels: dict[str, str]) -> JobView:
    return JobView("projects/p/locations/r/customJobs/1", "1", "r", "j", "", 0, "", "", "", "", labels)


def test_the_registry_model_and_its_rule_come_from_the_route_that_owns_the_data() -> None:
    routes = read_routes()
    run = succeeded("run-1", 0.9)  # data under datasets/: route default-tabular
    for labels in ({}, {"landfall-route": "regression"}, {"landfall-route": "nobody"}):
        found = target_for({**run.request, "labels": labels}, routes, "t:i")
        assert (found.route, found.model_id) == ("default-tabular", "landfall-default-tabular-churn-2026-11-22")
    nobodys = {**run.request, "dataset": {"uri": "gs://b/elsewhere/d/"}, "labels": {"landfall-route": "regression"}}
    assert target_for(nobodys, routes, "t:i").route == "direct"


def test_a_team_s_code_is_its_own_model_unless_the_route_binds_it() -> None:
    from pathlib import Path

    from schemas.model_version import code_name

    routes = read_routes()
    run = succeeded("run-1", 0.9)  # data under datasets/: route default-tabular, which binds no code
    mnist = {**run.request, "trainer": {"script": "gs://code/scripts/1f2e3d4c5b6a7988/main.py"}}
    edited = {**run.request, "trainer": {"script": "gs://code/scripts/99aa88bb77cc66dd/main.py"}}
    ddp = {**run.request, "trainer": {"script": "gs://code/scripts/0123456789abcdef/multinode.py"}}
    found = [target_for(r, routes, "t:i") for r in (mnist, edited, ddp)]
    assert found[0].model_id == found[1].model_id == "landfall-default-tabular-churn-2026-11-22-main"
    assert found[2].model_id == "landfall-default-tabular-churn-2026-11-22-multinode" != found[0].model_id
    assert found[2].display_name == "default-tabular/churn/2026-11-22 (multinode)"
    assert target_for(run.request, routes, "t:i").model_id == "landfall-default-tabular-churn-2026-11-22"

    # a route that binds an image: every version of that image trains one model of the route's dataset
    bound = read_routes(Path(__file__).parents[1] / "e2e" / "routes.toml")
    own = next(r for r in bound if r.name == "own-image")
    request = {**run.request, "dataset": {"uri": "gs://b/own-image/d1/"}, "trainer": dict(own.trainer)}
    assert target_for(request, bound, "t:i").model_id == "landfall-own-image-d1"
    other = {**request, "trainer": {"image_uri": "us-docker.pkg.dev/p/r/other-trainer:7"}}
    assert target_for(other, bound, "t:i").model_id == "landfall-own-image-d1-other-trainer"
    assert code_name({"image_uri": "host:5000/team/img@sha256:abc"}) == "img"
    assert code_name({"python_module": "ddp_example.train"}) == "ddp_example.train"
    assert code_name({"script": "gs://c/s/1/folder.pyz"}) == "folder" and code_name({}) == ""


@pytest.mark.parametrize(
    ("objects", "holds"),
    [
        ([], False),
        ([("m/model/", 0), ("m/model/metrics.json", 120), ("m/model/metrics.jsonl", 40)], False),
        ([("m/model/model.pt", 0)], False),
        ([("m/model/metrics.json", 120), ("m/model/model.pt", 4096)], True),
    ],
)
def test_a_model_folder_holds_a_model_when_a_file_but_the_figures_is_not_empty(
    objects: list[tuple[str, int]], holds: bool
) -> None:
    assert holds_a_model(objects) is holds


def test_a_job_that_wrote_no_model_is_not_registered_and_the_run_says_why() -> None:
    runs, registry = FakeRuns(), FakeRegistry()
    runs.put(succeeded("run-1", 0.9))
    assert register(runs, registry, "run-1", holds_model=False) == NO_MODEL
    run = runs.get("run-1")
    assert run is not None and run.model is None and registry.uploads == {}
    assert any("model not registered: the job wrote no model" in w for w in run.warnings), run.warnings
    assert run.submission.model_lease_until == format_timestamp(NOW), "the lease is given back"


def test_promotion_leases_are_one_holder_at_a_time_and_a_lapsed_one_is_free() -> None:
    later = NOW + timedelta(seconds=60)
    first, ok = taken("m", "run-1", now=NOW, until=later)(None)
    assert ok and first is not None
    assert taken("m", "run-2", now=NOW, until=later)(first) == (None, False)
    assert taken("m", "run-1", now=NOW, until=later)(first)[1], "its holder takes it again"
    assert taken("m", "run-2", now=later + timedelta(seconds=1), until=later + timedelta(seconds=60))(first)[1]
    back, mine = given_back("run-1", now=NOW)(first)
    assert mine and back is not None and taken("m", "run-2", now=NOW, until=later)(back)[1]
    assert given_back("run-2", now=NOW)(first) == (None, False)


def test_a_rival_of_the_same_round_is_compared_with_production_through_the_champion_both_scored() -> None:
    registry, runs = FakeRegistry(), FakeRuns()
    runs.put(succeeded("run-0", 0.80))
    register(runs, registry, "run-0")
    old = champion_name(registry)  # version 1
    runs.put(succeeded("run-a", 0.90, (old, 0.80)))
    register(runs, registry, "run-a")  # promoted: +0.10 over version 1
    production = registry.get(champion_name(registry))
    assert production is not None and production.version_id == "2"
    better = decide(succeeded("run-b", 0.93, (old, 0.78)), RULE, production, now=NOW)  # +0.15 over version 1
    worse = decide(succeeded("run-c", 0.95, (old, 0.90)), RULE, production, now=NOW)  # +0.05 over version 1
    assert (better.decision, better.scored_version, better.champion_version) == ("promoted", "1", "2"), better.reason
    assert worse.decision == "kept" and "+0.0500" in worse.reason and "+0.1000" in worse.reason, worse.reason
    elsewhere = decide(succeeded("run-d", 0.99, ("another@1", 0.5)), RULE, production, now=NOW)
    assert elsewhere.decision == "not-comparable"


class SlowRegistry(FakeRegistry):
    """Each call takes a moment, so concurrent registrations interleave as they would against Vertex."""

    def get(self, name: str) -> VersionView | None:
        time.sleep(0.002)
        return super().get(name)

    def upload(self, model_id: str, model: dict[str, Any]) -> VersionView:
        time.sleep(0.005)
        return super().upload(model_id, model)


def test_four_challengers_of_one_folder_finishing_at_once_end_with_production_on_the_best() -> None:
    runs, registry, promotions = FakeRuns(), SlowRegistry(), FakePromotions()
    runs.put(succeeded("run-0", 0.80))
    register(runs, registry, "run-0")
    champion = champion_name(registry)
    scores = {"run-a": 0.86, "run-b": 0.95, "run-c": 0.90, "run-d": 0.88}
    for run_id, score in scores.items():
        runs.put(succeeded(run_id, score, (champion, 0.80)))
    outcomes: list[str] = []
    threads = [
        threading.Thread(target=lambda r=r: outcomes.append(register(runs, registry, r, promotions=promotions)))
        for r in scores
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    best = registry.get(f"{registry.model_name(MODEL_ID)}@production")
    assert best is not None and best.metadata["run_id"] == "run-b", outcomes
    decisions = {}
    for run_id in scores:
        run = runs.get(run_id)
        assert run is not None and run.model is not None and run.model.promotion is not None
        decisions[run_id] = run.model.promotion.decision
    assert [r for r, d in decisions.items() if d == "promoted"] == ["run-b"], decisions
    assert set(decisions.values()) <= {"promoted", "kept", "superseded"}, decisions
