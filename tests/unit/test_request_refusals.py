"""Who may run what, and what a request may say: every form of tests/refused_requests.py is REJECTED before any job
with its rule named; a mistyped field is refused wherever a request is read (publish, landfall.json, the CLI),
naming it and the nearest known field; Landfall's labels are Landfall's; a command runs only on the deployment's
own images or where a setting allows it."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from deploy.routes import read_routes
from functions.dispatch.request_rules import request_problems
from functions.ingest.overrides import OverrideError, apply_overrides
from functions.settings import SettingsError, settings_from_env
from landfall.commands.submit import load_request
from landfall.errors import CommandError
from schemas.errors import SchemaError
from schemas.request_labels import MAX_REQUEST_LABELS
from schemas.training_request import parse_training_request
from tests import refused_requests
from tests.fakes.world import SETTINGS, World

NOW = datetime(2026, 11, 26, tzinfo=UTC)
DATA = "gs://landfall-landing/datasets/text/"
CASES = refused_requests.cases(SETTINGS.code_bucket, SETTINGS.landing_bucket)
OWN_IMAGE = SETTINGS.trainer_image.rsplit("/", 1)[0] + "/team-image:1"


@pytest.mark.parametrize("case", CASES)
def test_each_form_is_rejected_before_any_job_with_its_rule_named(case: str) -> None:
    fields, says = CASES[case]
    w = World()
    body = refused_requests.request(fields, f"refused-{case}", DATA)
    assert w.deliver(json.dumps(body).encode()) == "rejected:invalid-request"
    (run,) = (w.run(run_id) for run_id in w.runs.docs)
    assert run.state == "REJECTED" and run.error is not None
    assert all(part in run.error.message for part in says), (says, run.error.message)
    assert not w.vertex.jobs


TYPOS = [  # (request fields, the field named, the nearest known one)
    ({"constraints": {"budget_usdd": 5}}, "constraints.budget_usdd", "budget_usd"),
    ({"constraints": {"spott": "never"}}, "constraints.spott", "spot"),
    ({"constraints": {"budgetUsd": 5}}, "constraints.budgetUsd", "budget_usd"),
    ({"hyperparamters": {"epochs": 3}}, "hyperparamters", "hyperparameters"),
    ({"hyperparameters": {"epoch": 3}}, "hyperparameters.epoch", "epochs"),
    ({"workload": {"trainable_params": 10}}, "workload.trainable_params", "trainable_parameters"),
    ({"model": {"preset": "mlp-small", "label_col": "y"}}, "model.label_col", "label_column"),
    ({"source": {"knd": "direct"}}, "source.knd", "kind"),
    ({"dataset": {"uri": DATA, "object_cnt": 3}}, "dataset.object_cnt", "object_count"),
    ({"dataset": {"uri": DATA, "objects": [{"name": "a.csv", "sise": 3}]}}, "dataset.objects[0].sise", "size"),
    ({"trainer": {"scrpt": "gs://landfall-code/t.py"}}, "trainer.scrpt", "script"),
    ({"creation_time": "2026-11-22T10:00:00Z"}, "creation_time", "created_at"),
]


@pytest.mark.parametrize(("fields", "field", "known"), TYPOS, ids=[f for _, f, _ in TYPOS])
def test_a_mistyped_field_is_refused_naming_it_and_the_nearest_known_one(
    fields: dict[str, Any], field: str, known: str
) -> None:
    body = {"dataset": {"uri": DATA}, "task": "tabular-classification", "model": {"preset": "mlp-small"}} | fields
    with pytest.raises(SchemaError) as caught:
        parse_training_request(body)
    assert caught.value.field == field and repr(known) in str(caught.value)


@pytest.mark.parametrize("case", ["typo-budget", "typo-spot", "typo-hyperparameters", "typo-workload"])
def test_the_topic_s_schema_refuses_each_mistyped_field_too(case: str) -> None:
    """Where the requests topic carries its Protocol Buffer schema (Google Cloud), protobuf's JSON parser refuses the
    same fields at publish time; the dispatcher's refusal is the same rule, with the nearest name."""
    from google.protobuf import json_format

    from schemas.proto import message_class

    fields, says = CASES[case]
    body = json.dumps(refused_requests.request(fields, "k", DATA))
    with pytest.raises(json_format.ParseError, match=says[0].rsplit(".", 1)[-1]):
        json_format.Parse(body, message_class()())


def test_a_field_with_no_near_name_lists_the_known_ones() -> None:
    body = {"dataset": {"uri": DATA}, "task": "tabular-classification", "model": {"preset": "mlp-small"}}
    with pytest.raises(SchemaError, match=r"hyperparameters.lr: is not a field of hyperparameters; known fields: "):
        parse_training_request(body | {"hyperparameters": {"lr": 0.1}})


def test_the_cli_refuses_a_mistyped_field_before_publishing(tmp_path: Path) -> None:
    path = tmp_path / "request.json"
    fields, _ = CASES["typo-budget"]
    path.write_text(json.dumps(refused_requests.request(fields, "k", DATA)))
    with pytest.raises(CommandError, match=r"constraints.budget_usdd: .*did you mean 'budget_usd'\?"):
        load_request(str(path))


def test_landfall_json_names_the_nearest_settable_field_and_refuses_landfall_s_labels() -> None:
    route = dataclasses.replace(read_routes()[0], overridable=("*",))
    with pytest.raises(OverrideError, match=r"constraints.budget_usdd \(.*; did you mean constraints.budget_usd\?"):
        apply_overrides({}, {"constraints": {"budget_usdd": 5}}, route)
    typo = r"workload.trainable_params \(.*did you mean workload.trainable_parameters\?"
    with pytest.raises(OverrideError, match=typo):
        apply_overrides({}, {"workload": {"trainable_params": 5}}, route)
    with pytest.raises(OverrideError, match=r"labels.landfall-route \(Landfall's own label"):
        apply_overrides({}, {"labels": {"team": "a", "landfall-route": "other"}}, route)
    assert apply_overrides({}, {"labels": {"team": "a"}}, route) == {"labels": {"team": "a"}}


def _built_in(**fields: Any) -> dict[str, Any]:
    return {"dataset": {"uri": DATA}, "task": "tabular-classification", "model": {"preset": "mlp-small"}, **fields}


@pytest.mark.parametrize("key", ["landfall", "landfall-run-id", "landfall-phase", "landfall-anything"])
def test_landfall_s_labels_are_refused_naming_the_label(key: str) -> None:
    with pytest.raises(SchemaError, match=rf"labels: '{key}' is Landfall's own label"):
        parse_training_request(_built_in(labels={key: "x"}))


def test_a_request_carries_as_many_labels_as_fit_beside_landfall_s() -> None:
    own = {f"team-{i}": "x" for i in range(MAX_REQUEST_LABELS)}
    assert MAX_REQUEST_LABELS == 60
    request = parse_training_request(_built_in(labels=own | {"landfall-route": "default-tabular"}))
    assert request_problems(request, SETTINGS, NOW) == []  # ingest's label, naming the route that owns the data
    with pytest.raises(SchemaError, match="has 61 labels; a request may carry at most 60"):
        parse_training_request(_built_in(labels=own | {"one-more": "x"}))


def test_the_route_label_must_name_the_route_that_owns_the_data() -> None:
    elsewhere = parse_training_request(
        _built_in(dataset={"uri": "gs://landfall-landing/nobody/d/"}, labels={"landfall-route": "default-tabular"})
    )
    (problem,) = request_problems(elsewhere, SETTINGS, NOW)
    assert "'landfall-route' is Landfall's own label" in problem and "no route" in problem


def _image(image: str, **trainer: Any) -> dict[str, Any]:
    return {"dataset": {"uri": DATA}, "trainer": {"image_uri": image, **trainer}, "workload": {"parameters": 10}}


def test_a_command_runs_on_the_deployment_s_own_images_or_where_a_setting_allows_it() -> None:
    prebuilt = f"{refused_requests.PREBUILT}/pytorch-gpu.2-4.py310:latest"
    for trainer in ({"command": ["python", "-m", "team.train"]}, {"args": ["--epochs", "2"]}):
        assert request_problems(parse_training_request(_image(OWN_IMAGE, **trainer)), SETTINGS, NOW) == []
        refused = request_problems(parse_training_request(_image(prebuilt, **trainer)), SETTINGS, NOW)
        assert len(refused) == 1 and "deployment's own repository" in refused[0]
        place = f"{refused_requests.PREBUILT}/"
        env = {"GOOGLE_CLOUD_PROJECT": "landfall-local", "LANDFALL_COMMAND_IMAGE_PREFIXES": place}
        allowing = settings_from_env(env)
        assert request_problems(parse_training_request(_image(prebuilt, **trainer)), allowing, NOW) == []
    # an image as built (no command, no arguments) runs from any allowed place
    assert request_problems(parse_training_request(_image(prebuilt)), SETTINGS, NOW) == []


@pytest.mark.parametrize("name", ["LANDFALL_ALLOWED_IMAGE_PREFIXES", "LANDFALL_COMMAND_IMAGE_PREFIXES"])
def test_an_image_place_setting_that_does_not_parse_is_refused_by_name(name: str) -> None:
    with pytest.raises(SettingsError, match=rf"{name}: 'us-docker.pkg.dev/x/../y' has a '\.' or '\.\.'"):
        settings_from_env({"GOOGLE_CLOUD_PROJECT": "p", name: "us-docker.pkg.dev/x/../y/"})
