"""Model Registry registration (functions/records/model_registration.py): once per SUCCEEDED run, however many
deliveries see it succeed; the champion/challenger decision by the route's rule; routes' promotion rules checked."""

from __future__ import annotations

import argparse
import copy
import json
import threading
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from deploy.routes import RouteError, read_routes
from functions.errors import TransientError
from functions.records.model_registration import (
    CHAMPION_DIR_ENV,
    CHAMPION_VERSION_ENV,
    REGISTRATION_LEASE,
    Target,
    champion_env,
    claimed_registration,
    decide,
    model_message,
    register_model,
    scores,
    target_for,
)
from landfall.errors import CommandError
from schemas.model_version import RUN_LABEL, PromotionRule, label_value, model_id_for
from schemas.run_finished import run_finished
from schemas.run_record import RunRecord, parse_run_record
from tests.fakes.models import FakePromotions, FakeRegistry
from tests.fakes.runs import FakeRuns
from tests.fakes.world import NOW

GOLDEN: dict[str, Any] = json.loads((Path(__file__).parents[2] / "schemas/examples/run_record.json").read_text())
RULE = PromotionRule(metric="accuracy", direction="higher", min_improvement=0.01)
MODEL_ID = "landfall-promoted-iris"


def succeeded(run_id: str, accuracy: float, champion: tuple[str, float] | None = None) -> RunRecord:
    doc = copy.deepcopy(GOLDEN)
    doc.pop("model")
    doc["submission"].pop("model_lease_until")
    metrics: dict[str, Any] = {
        "final": {"loss": 0.2, "accuracy": accuracy},
        "evaluation": {"split": "held-out", "samples": 30},
    }
    if champion is not None:
        metrics["champion"] = {"version": champion[0], "final": {"accuracy": champion[1]}, "samples": 30}
    return replace(parse_run_record(doc), run_id=run_id, metrics=metrics)


def target(_: dict[str, Any]) -> Target:
    return Target(MODEL_ID, "promoted/iris", "promoted", "iris", RULE, "image:local")


def register(
    runs: FakeRuns,
    registry: FakeRegistry,
    run_id: str,
    at: Any = NOW,
    promotions: FakePromotions | None = None,
    holds_model: bool = True,
) -> str:
    return register_model(
        run_id,
        runs,
        registry,
        target,
        now=lambda: at,
        promotions=promotions or FakePromotions(),
        holds_model=lambda folder: holds_model,
    )


def champion_name(registry: FakeRegistry) -> str:
    return f"{registry.model_name(MODEL_ID)}@{registry.holder(MODEL_ID)}"


def test_first_model_becomes_production_then_a_worse_one_stays_and_a_better_one_moves_the_alias() -> None:
    runs, registry = FakeRuns(), FakeRegistry()
    runs.put(succeeded("run-1", 0.90))
    assert register(runs, registry, "run-1").endswith(":first")
    assert registry.holder(MODEL_ID) == "1"

    runs.put(succeeded("run-2", 0.60, (champion_name(registry), 0.90)))
    said = register(runs, registry, "run-2")
    assert said.endswith(":kept"), said
    assert registry.holder(MODEL_ID) == "1"
    kept = runs.get("run-2")
    assert kept is not None and kept.model is not None and kept.model.promotion is not None
    assert (kept.model.version_id, kept.model.promotion.champion_score, kept.model.promotion.challenger_score) == (
        "2",
        0.90,
        0.60,
    )
    assert "30 rows" in kept.model.promotion.data

    runs.put(succeeded("run-3", 0.95, (champion_name(registry), 0.90)))
    assert register(runs, registry, "run-3").endswith(":promoted")
    assert registry.holder(MODEL_ID) == "3"
    labels = [v.labels[RUN_LABEL] for v in registry.versions(MODEL_ID)]
    assert labels == ["run-1", "run-2", "run-3"]
    third = registry.versions(MODEL_ID)[2]
    assert third.labels["landfall-decision"] == "promoted" and third.metadata["promotion"]["champion_version"] == "1"
    assert third.artifact_uri == GOLDEN["artifacts"]["model_dir"]
    message = run_finished(runs.get("run-3") or succeeded("x", 0))
    assert message.model["version_id"] == "3" and message.model["promotion"]["decision"] == "promoted"


def test_an_improvement_below_the_least_one_or_a_champion_scored_elsewhere_does_not_promote() -> None:
    runs, registry = FakeRuns(), FakeRegistry()
    runs.put(succeeded("run-1", 0.90))
    register(runs, registry, "run-1")
    runs.put(succeeded("run-2", 0.905, (champion_name(registry), 0.90)))  # +0.005 < 0.01
    assert register(runs, registry, "run-2").endswith(":kept")
    runs.put(succeeded("run-3", 0.99))  # no champion score: a team's code that did not report it
    assert register(runs, registry, "run-3").endswith(":not-comparable")
    skipped = succeeded("run-5", 0.99)
    runs.put(replace(skipped, metrics={**(skipped.metrics or {}), "champion": {"skipped": "other feature columns"}}))
    register(runs, registry, "run-5")
    five = runs.get("run-5")
    assert five is not None and five.model is not None and five.model.promotion is not None
    assert "(other feature columns)" in five.model.promotion.reason, five.model.promotion.reason
    runs.put(succeeded("run-4", 0.99, (f"{registry.model_name(MODEL_ID)}@2", 0.5)))  # scored another version
    said = register(runs, registry, "run-4")
    assert said.endswith(":not-comparable")
    four = runs.get("run-4")
    assert four is not None and four.model is not None and four.model.promotion is not None
    assert "not " in four.model.promotion.reason and registry.holder(MODEL_ID) == "1"


def test_redelivered_and_concurrent_registrations_upload_once() -> None:
    runs, registry = FakeRuns(), FakeRegistry()
    runs.put(succeeded("run-1", 0.9))
    outcomes: list[str] = []
    threads = [threading.Thread(target=lambda: outcomes.append(register(runs, registry, "run-1"))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert registry.uploads == {"run-1": 1}, outcomes
    assert register(runs, registry, "run-1") == "already-registered"
    assert sum(o.startswith("registered") for o in outcomes) == 1


def test_an_upload_recorded_nowhere_is_found_by_its_label_and_adopted_not_uploaded_again() -> None:
    runs, registry = FakeRuns(), FakeRegistry()
    runs.put(succeeded("run-1", 0.9))
    registry.fail_alias = TransientError("MergeVersionAliases: unavailable")
    with pytest.raises(TransientError):
        register(runs, registry, "run-1")
    after = runs.get("run-1")
    assert after is not None and after.model is None, "nothing recorded before the alias moved"
    registry.fail_alias = None
    said = register(runs, registry, "run-1", NOW + timedelta(seconds=1))  # the lease was given back at once
    assert said.startswith("adopted") and said.endswith(":first"), said
    assert registry.uploads == {"run-1": 1} and registry.holder(MODEL_ID) == "1"


def test_a_live_lease_keeps_a_second_delivery_out_until_it_lapses() -> None:
    runs, registry = FakeRuns(), FakeRegistry()
    runs.put(succeeded("run-1", 0.9))
    registry.fail_upload = KeyboardInterrupt()  # the delivery dies holding the lease (no release reaches Firestore)
    runs_before = copy.deepcopy(runs.docs)
    with pytest.raises(KeyboardInterrupt):
        register(runs, registry, "run-1")
    runs.docs = runs_before
    runs.apply("run-1", claimed_registration(now=NOW))  # its claim stands
    registry.fail_upload = None
    assert register(runs, registry, "run-1", NOW + timedelta(seconds=5)) == "registering-elsewhere"
    assert register(runs, registry, "run-1", NOW + REGISTRATION_LEASE + timedelta(seconds=1)).startswith("registered")
    assert registry.uploads == {"run-1": 1}


def test_the_target_is_one_model_per_route_and_dataset_with_a_valid_id() -> None:
    routes = read_routes()
    run = succeeded("run-1", 0.9)
    found = target_for(run.request, routes, "trainer:image")
    assert found.model_id == "landfall-default-tabular-churn-2026-11-22" and found.serving_image == "trainer:image"
    assert found.rule is None
    long = model_id_for("r" * 50, "d" * 50)
    assert len(long) <= 63 and long == model_id_for("r" * 50, "d" * 50) != model_id_for("r" * 50, "e" * 50)
    assert len(label_value("X" * 100)) == 63 and label_value("Run-A/b") == "run-a-b"


def test_a_built_in_model_is_registered_with_the_command_that_serves_it_and_a_teams_container_as_it_is() -> None:
    """The built-in trainer's model names `python -m trainer.serve` on the trainer image with its routes and port
    (ModelContainerSpec command, health_route, predict_route, ports); a team's image or a route's serving_image is
    their own container, registered with its image only."""
    routes = read_routes()
    run = succeeded("run-1", 0.9)
    built_in = target_for(run.request, routes, "trainer:image")
    message = model_message(run, built_in, decide(run, None, None, now=NOW))
    assert message["container_spec"] == {
        "image_uri": "trainer:image",
        "command": ["python", "-m", "trainer.serve"],
        "health_route": "/health",
        "predict_route": "/predict",
        "ports": [{"container_port": 8080}],
    }
    from google.cloud import aiplatform_v1  # the field names are ModelContainerSpec's (proto-plus refuses others)

    assert list(aiplatform_v1.ModelContainerSpec(**message["container_spec"]).command)[-1] == "trainer.serve"
    team = replace(run, request={**run.request, "trainer": {"image_uri": "team/serve:1"}})
    assert model_message(team, target_for(team.request, routes, "trainer:image"), decide(team, None, None, now=NOW))[
        "container_spec"
    ] == {"image_uri": "team/serve:1"}
    script = replace(run, request={**run.request, "trainer": {"script": "gs://code/train.py"}})
    assert not target_for(script.request, routes, "trainer:image").builtin_serving
    own = (replace(routes[0], serving_image="team/serving:2"),)
    routed = run  # on the data of the first route
    assert model_message(routed, target_for(routed.request, own, "t:i"), decide(routed, None, None, now=NOW))[
        "container_spec"
    ] == {"image_uri": "team/serving:2"}


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ('metric = "accuracy"\ndirection = "up"', "'up' is not one of 'higher', 'lower'"),
        ('metric = "f1"\ndirection = "higher"', "metric 'f1' is not a figure the built-in trainer reports"),
        ('metric = "accuracy"\ndirection = "higher"\nmin_improvement = -1', "min_improvement"),
        ('metric = "accuracy"\ndirection = "higher"\nmargin = 1', "unknown key(s) ['margin']"),
    ],
)
def test_a_malformed_promotion_rule_is_refused_naming_what_to_write(tmp_path: Path, table: str, expected: str) -> None:
    path = tmp_path / "routes.toml"
    path.write_text(
        '[[routes]]\nname = "r"\nbucket = "*"\nprefix = "d/"\ntask = "tabular-classification"\n'
        f'model_preset = "mlp-small"\n[routes.promotion]\n{table}\n'
    )
    with pytest.raises(RouteError, match="promotion") as caught:
        read_routes(path)
    assert expected in str(caught.value)


def test_a_job_of_a_route_with_a_rule_names_the_production_model_to_score() -> None:
    runs, registry = FakeRuns(), FakeRegistry()
    where = target({})
    assert champion_env(where, registry) == {}, "no production version yet"
    runs.put(succeeded("run-1", 0.9))
    register(runs, registry, "run-1")
    env = champion_env(where, registry)
    assert env == {
        CHAMPION_DIR_ENV: GOLDEN["artifacts"]["model_dir"],
        CHAMPION_VERSION_ENV: f"{registry.model_name(MODEL_ID)}@1",
    }
    assert champion_env(replace(where, rule=None), registry) == {}, "no rule, nothing to compare"


def test_the_cli_lists_versions_with_decisions_and_rolls_production_back(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from landfall.commands import models

    runs, registry = FakeRuns(), FakeRegistry()
    runs.put(succeeded("run-1", 0.80))
    register(runs, registry, "run-1")
    runs.put(succeeded("run-2", 0.95, (champion_name(registry), 0.80)))
    register(runs, registry, "run-2")
    recorded: list[tuple[str, str]] = []
    monkeypatch.setattr(models, "_registry", lambda: registry)
    monkeypatch.setattr(models, "_record", lambda run_id, promotion: recorded.append((run_id, promotion.decision)))
    monkeypatch.setattr(models, "_decisions", lambda versions: {})
    models.cmd_models(argparse.Namespace(name="", json=False))
    table = capsys.readouterr().out
    assert "promoted" in table and "first" in table and "accuracy 0.9500" in table, table
    models.cmd_rollback(argparse.Namespace(model=MODEL_ID))
    assert registry.holder(MODEL_ID) == "1" and recorded == [("run-1", "manual-rollback")]
    with pytest.raises(CommandError, match="nothing to roll back to"):
        models.cmd_rollback(argparse.Namespace(model=MODEL_ID))


def test_the_deployment_grants_what_registration_needs_and_no_new_identity_or_act_as() -> None:
    """docs/models.md "Permissions": the identities that register models (listener, reconciler) and read the champion
    (dispatch) hold roles/aiplatform.user (aiplatform.models.upload/get/list/update); UploadModel sends no
    serviceAccount, so no identity needs actAs for it (the trainer account's serviceAccountUser grants are for
    CreateCustomJob); the trainer reads the champion's folder with its grant on the artifacts bucket."""
    from deploy.gcp.config import Grant, load_deploy_config

    config = load_deploy_config()
    for key in ("listener", "reconciler", "dispatch"):
        assert Grant("roles/aiplatform.user", "project") in config.account(key).grants, key
    trainer = config.account("trainer").grants
    assert any(g.on == "bucket:artifacts" and g.role in ("roles/storage.objectUser",) for g in trainer)
    assert not any(g.role.startswith("roles/aiplatform") for g in trainer), "the trainer registers nothing"
    assert "serviceAccount" not in model_message(succeeded("run-1", 0.9), target({}), decide_first())


def decide_first() -> Any:
    return decide(succeeded("run-1", 0.9), RULE, None, now=NOW)


@pytest.mark.parametrize(
    ("metrics", "expected"),
    [
        ({"final": {"accuracy": 0.9}, "champion": {"version": "m@1", "final": {"accuracy": 0.8}}}, (0.9, 0.8, "m@1")),
        ({"final": {"accuracy": 0.9, "champion_accuracy": 0.7, "champion_version": "m@2"}}, (0.9, 0.7, "m@2")),
        ({"final": {"accuracy": 0.9}, "champion": {"version": "m@1", "skipped": "other columns"}}, (0.9, None, "")),
        ({"final": {"accuracy": True}}, (None, None, "")),
        (None, (None, None, "")),
    ],
)
def test_scores_read_the_built_in_champion_section_or_a_team_codes_metrics_lines(
    metrics: dict[str, Any] | None, expected: tuple[float | None, float | None, str]
) -> None:
    assert scores(metrics, "accuracy") == expected


def test_landfall_model_shows_the_lineage_counts_as_the_integers_landfall_wrote() -> None:
    """A version's metadata comes back through a protobuf Value, whose numbers are all doubles (seen in `landfall
    model` on the local stack: "4.0 objects", "epochs": 10.0); whole numbers are shown as integers again."""
    from landfall.commands.models import whole_numbers

    lineage = {"dataset": {"read": {"object_count": 4.0}}, "plan": {"replica_count": 1.0}, "lr": [0.01, 64.0], "x": "7"}
    assert whole_numbers(lineage) == {
        "dataset": {"read": {"object_count": 4}},
        "plan": {"replica_count": 1},
        "lr": [0.01, 64],
        "x": "7",
    }
    assert type(whole_numbers(4.0)) is int and whole_numbers(0.5) == 0.5


def test_the_models_list_shows_the_decision_a_promote_or_rollback_left_not_the_one_uploaded(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Model Registry keeps a version's labels and metadata as uploaded; the move is recorded on the run, and the
    list reads it from there."""
    from landfall.commands import models
    from landfall.queries import runs as run_queries

    runs, registry = FakeRuns(), FakeRegistry()
    runs.put(succeeded("run-1", 0.90))
    register(runs, registry, "run-1")
    runs.put(succeeded("run-2", 0.60, (champion_name(registry), 0.90)))
    assert register(runs, registry, "run-2").endswith(":kept")

    def documents(run_ids: list[str]) -> dict[str, dict[str, Any]]:
        assert len(run_ids) == len(set(run_ids)) == 2, "one batched read of each run"
        return {r.run_id: r.to_dict() for r in map(runs.get, run_ids) if r is not None}

    monkeypatch.setattr(models, "_registry", lambda: registry)
    monkeypatch.setattr(models, "_runs", lambda: runs)
    monkeypatch.setattr(models, "read_run", lambda run_id, command: runs.get(run_id))
    monkeypatch.setattr(run_queries, "read_run_documents", documents)

    def decisions() -> dict[str, str]:
        capsys.readouterr()  # what promote and rollback said
        models.cmd_models(argparse.Namespace(name="", json=False))
        header, *lines = capsys.readouterr().out.splitlines()
        at, decision, score = header.index("VERSION"), header.index("DECISION"), header.index("SCORE")
        rows = [line for line in lines if line.startswith("landfall-")]
        return {line[at:].split()[0]: line[decision:score].strip() for line in rows}

    assert decisions() == {"1": "first", "2": "kept"}
    models.cmd_promote(argparse.Namespace(run_id="run-2"))
    assert registry.holder(MODEL_ID) == "2"
    assert decisions() == {"1": "first", "2": "manual-promote"}
    assert registry.versions(MODEL_ID)[1].metadata["promotion"]["decision"] == "kept", "the upload's stays as it was"
    models.cmd_rollback(argparse.Namespace(model=MODEL_ID))
    assert registry.holder(MODEL_ID) == "1"
    assert decisions() == {"1": "manual-rollback", "2": "manual-promote"}
