"""A TrainingRequest with the team's own trainer: the `trainer` and `workload` objects, who may run what,
and how the planner sizes code Landfall did not write."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from functions.dispatch.request_rules import WORKLOAD_WAYS, request_problems
from functions.planning import plan_input_from_request, plan_request
from functions.settings import PREBUILT_TRAINING_IMAGE_PREFIXES, settings_from_env
from schemas.errors import SchemaError
from schemas.training_request import content_key, parse_training_request

SETTINGS = settings_from_env({"GOOGLE_CLOUD_PROJECT": "landfall-local"})
NOW = datetime(2026, 11, 26, tzinfo=UTC)
DATA = "gs://landfall-landing/datasets/text/"


def own(trainer: dict[str, Any], **rest: Any) -> dict[str, Any]:
    return {"dataset": {"uri": DATA, "total_bytes": 10_000_000}, "trainer": trainer, **rest}


SCRIPT = {"script": "gs://landfall-code/team/train.py", "requirements": ["numpy"], "args": ["--lr", "0.1"]}
SIZED = {"workload": {"parameters": 124_000_000}}


def test_settings_default_to_the_code_bucket_and_the_allowed_image_prefixes() -> None:
    assert SETTINGS.code_bucket == "landfall-code"
    own_repo = SETTINGS.trainer_image.rsplit("/", 1)[0] + "/"
    assert SETTINGS.allowed_image_prefixes == (own_repo, *PREBUILT_TRAINING_IMAGE_PREFIXES)
    custom = settings_from_env(
        {"GOOGLE_CLOUD_PROJECT": "p", "LANDFALL_ALLOWED_IMAGE_PREFIXES": "a.io/x/, b.io/y", "LANDFALL_CODE_BUCKET": "c"}
    )
    assert (custom.allowed_image_prefixes, custom.code_bucket) == (("a.io/x/", "b.io/y"), "c")


@pytest.mark.parametrize(
    ("trainer", "form"),
    [
        (SCRIPT, "script"),
        ({"package_uris": ["gs://landfall-code/p-0.1.tar.gz"], "python_module": "p.train"}, "package"),
        ({"image_uri": "us-docker.pkg.dev/vertex-ai/training/x:latest", "command": ["python", "t.py"]}, "image"),
    ],
)
def test_each_form_parses_without_task_or_model(trainer: dict[str, Any], form: str) -> None:
    request = parse_training_request(own(trainer, **SIZED))
    assert (request.trainer.form, request.trainer.launch, request.task, request.model.preset) == (
        form,
        "per-gpu",
        "",
        "",
    )
    assert parse_training_request(request.to_json()) == request


def test_the_built_in_trainer_still_needs_task_and_preset_and_keeps_its_content_key() -> None:
    with pytest.raises(SchemaError, match="task"):
        parse_training_request({"dataset": {"uri": DATA}, "model": {"preset": "mlp-small"}})
    built_in = parse_training_request({"dataset": {"uri": DATA}, "task": "causal-lm", "model": {"preset": "gpt-tiny"}})
    assert built_in.trainer.builtin and built_in.trainer.launch == ""
    assert built_in.idempotency_key == "content:" + content_key(built_in).removeprefix("content:")
    # The key of a built-in request does not change with the new fields (they count only when set).
    data = built_in.to_dict()
    for name in ("idempotency_key", "retry_of"):
        del data[name]
    assert parse_training_request(data).idempotency_key == built_in.idempotency_key
    assert parse_training_request(own(SCRIPT, **SIZED)).idempotency_key != built_in.idempotency_key


@pytest.mark.parametrize(
    ("trainer", "match"),
    [
        ({"script": "gs://c/t.py", "image_uri": "x/y:1"}, "exactly one of trainer.script"),
        ({"args": ["a"]}, "found none of them"),
        ({"package_uris": ["gs://c/p.whl"]}, "trainer.python_module"),
        ({"python_module": "p.train"}, "trainer.package_uris"),
        ({"script": "/tmp/train.py"}, "gs://BUCKET/PATH"),
        ({"script": "gs://c/train.sh"}, "Python file"),
        ({"image_uri": "x/y:1", "requirements": ["numpy"]}, "container image holds its own"),
        ({"script": "gs://c/t.py", "command": ["python"]}, "applies to trainer.image_uri only"),
        ({"script": "gs://c/t.py", "env": {"LANDFALL_RUN_ID": "x"}}, "trainer contract"),
        ({"script": "gs://c/t.py", "env": {"RANK": "1"}}, "trainer contract"),
        ({"script": "gs://c/t.py", "launch": "per-rack"}, "per-gpu"),
        ({"script": "gs://c/t.py", "gpu_capabilities": ["9.0"]}, "Landfall's trainer images, which declare"),
        ({"image_uri": "x/y:1", "gpu_capabilities": ["sm_90"]}, r"trainer.gpu_capabilities: expected a CUDA"),
        ({"image_uri": "x/y:1", "gpu_capabilities": [9.0]}, "trainer.gpu_capabilities"),
    ],
)
def test_a_malformed_trainer_is_refused_naming_the_field(trainer: dict[str, Any], match: str) -> None:
    with pytest.raises(SchemaError, match=match):
        parse_training_request(own(trainer, **SIZED))


def test_an_own_trainer_passes_the_rules_when_its_code_and_size_are_allowed() -> None:
    assert request_problems(parse_training_request(own(SCRIPT, **SIZED)), SETTINGS, NOW) == []
    image = {"image_uri": SETTINGS.trainer_image.rsplit("/", 1)[0] + "/team-image:1"}
    assert request_problems(parse_training_request(own(image, **SIZED)), SETTINGS, NOW) == []


@pytest.mark.parametrize(
    ("trainer", "workload", "rule"),
    [
        ({"image_uri": "docker.io/evil/miner:latest"}, SIZED, "not under an allowed image prefix"),
        ({"script": "gs://someone-else/train.py"}, SIZED, "outside the code bucket"),
        ({"package_uris": ["gs://landfall-landing/p.whl"], "python_module": "p"}, SIZED, "outside the code bucket"),
        (SCRIPT, {}, "cannot size code it did not write"),
    ],
)
def test_the_rule_a_request_breaks_is_named(trainer: dict[str, Any], workload: dict[str, Any], rule: str) -> None:
    problems = request_problems(parse_training_request(own(trainer, **workload)), SETTINGS, NOW)
    assert len(problems) == 1 and rule in problems[0]
    if "size" in rule:
        assert all(way in problems[0] for way in WORKLOAD_WAYS)


@pytest.mark.parametrize(
    "sizing",
    [
        {"model": {"preset": "gpt-124m"}},
        {"workload": {"parameters": 50_000_000}},
        {"workload": {"memory_gib_per_gpu": 10, "step_seconds": 0.2}},
        {"constraints": {"machine_type": "g2-standard-4", "accelerator_count": 1, "replica_count": 1}},
    ],
)
def test_each_of_the_four_ways_sizes_the_work(sizing: dict[str, Any]) -> None:
    request = parse_training_request(own(SCRIPT, **sizing))
    assert request_problems(request, SETTINGS, NOW) == []
    outcome = plan_request(plan_input_from_request(request), now=NOW)
    assert outcome.plan is not None
    assert any("own code sized by" in line for line in outcome.plan.assumptions), outcome.plan.assumptions


def test_measured_memory_and_step_time_override_the_models() -> None:
    def plan(workload: dict[str, Any]) -> Any:
        request = parse_training_request(
            own(SCRIPT, workload=workload, hyperparameters={"batch_size": 32}, constraints={"prefer": "cheapest"})
        )
        outcome = plan_request(plan_input_from_request(request), now=NOW)
        assert outcome.plan is not None
        return outcome.plan

    small = plan({"parameters": 1_000_000, "memory_gib_per_gpu": 2, "step_seconds": 0.1, "samples_per_epoch": 32_000})
    big = plan({"parameters": 1_000_000, "memory_gib_per_gpu": 70, "step_seconds": 0.1, "samples_per_epoch": 32_000})
    slow = plan({"parameters": 1_000_000, "memory_gib_per_gpu": 2, "step_seconds": 5, "samples_per_epoch": 32_000})
    assert small.accelerator_type and big.accelerator_type  # measured per GPU: never a CPU machine
    assert big.memory.total_bytes == 70 * 2**30 and small.memory.total_bytes == 2 * 2**30
    assert slow.estimated_hours > small.estimated_hours * 5
    assert json.dumps(small.to_dict())


def test_a_route_binds_a_prefix_to_a_trainer_and_landfall_json_overrides_only_what_it_allows(tmp_path: Any) -> None:
    from deploy.routes import RouteError, read_routes
    from functions.ingest.overrides import OverrideError, apply_overrides

    routes = tmp_path / "routes.toml"
    routes.write_text(
        """
[[routes]]
name = "team-a"
bucket = "*"
prefix = "team-a/"
task = ""
model_preset = ""
overridable = ["trainer.args", "workload.*"]
[routes.trainer]
script = "gs://landfall-code/team-a/train.py"
requirements = ["numpy"]
[routes.workload]
parameters = 1000000
"""
    )
    (route,) = read_routes(routes)
    assert route.trainer_spec.script == "gs://landfall-code/team-a/train.py"
    assert route.trainer_spec.launch == "per-gpu" and route.workload_spec.parameters == 1_000_000
    base = parse_training_request(own(route.trainer, workload=route.workload)).to_dict()
    merged = apply_overrides(base, {"trainer": {"args": ["--epochs", "3"]}}, route)
    assert parse_training_request(merged).trainer.args == ("--epochs", "3")
    with pytest.raises(OverrideError, match=r"trainer\.image_uri \(route 'team-a' does not allow it"):
        apply_overrides(base, {"trainer": {"image_uri": "docker.io/x:1"}}, route)
    routes.write_text(routes.read_text().replace('requirements = ["numpy"]', 'image_uri = "x/y:1"'))
    with pytest.raises(RouteError, match=r"exactly one of trainer\.script"):
        read_routes(routes)
    # A route of a team's image declares the GPUs the image runs on, as a request would.
    routes.write_text(
        routes.read_text()
        .replace('script = "gs://landfall-code/team-a/train.py"\n', "")
        .replace('image_uri = "x/y:1"', 'image_uri = "x/y:1"\ngpu_capabilities = ["9.0"]')
    )
    (route,) = read_routes(routes)
    request = parse_training_request(own(route.trainer, workload=route.workload))
    assert request.trainer.gpu_capabilities == ("9.0",)
    assert plan_input_from_request(request).gpu_capabilities == ("9.0",)


def test_a_team_image_declares_its_gpus_and_the_planner_keeps_to_them() -> None:
    """trainer.gpu_capabilities reaches the planner through the request: an image with H100 kernels only (sm_90) is
    planned on H100 or H200, never on the cheaper GPUs it cannot run on."""
    image = {"image_uri": SETTINGS.trainer_image.rsplit("/", 1)[0] + "/team-image:1", "gpu_capabilities": ["9.0"]}
    big = {"parameters": 1_300_000_000, "layers": 24, "hidden_size": 2048, "seq_len": 2048, "samples_per_epoch": 10**6}
    request = parse_training_request(own(image, workload=big))
    assert request.trainer.gpu_capabilities == ("9.0",)
    inp = plan_input_from_request(request)
    assert inp.gpu_capabilities == ("9.0",) and inp.image_uri == image["image_uri"]
    plan = plan_request(inp, now=NOW).plan
    assert plan is not None and plan.accelerator_type in {
        "NVIDIA_H100_80GB",
        "NVIDIA_H100_MEGA_80GB",
        "NVIDIA_H200_141GB",
    }
    anywhere = plan_request(dataclasses.replace(inp, image_uri="", gpu_capabilities=()), now=NOW).plan
    assert anywhere is not None and anywhere.accelerator_type != plan.accelerator_type, "the declaration decided"


def test_the_topic_schema_carries_gpu_capabilities() -> None:
    from google.protobuf import json_format

    from schemas.proto import message_class

    body = own({"image_uri": "x/y:1", "gpu_capabilities": ["8.0", "9.0"]}, **SIZED)
    message = json_format.Parse(json.dumps(body), message_class()())
    assert list(message.trainer.gpu_capabilities) == ["8.0", "9.0"]


def test_a_team_image_gets_the_champion_through_the_mount_and_the_stand_in_copies_it(tmp_path: Any) -> None:
    """The route's champion (docs/trainer-contract.md) reaches a team's image as a /gcs/ path, like its other
    folders; where no mount is (the Vertex emulator's Cloud Storage stand-in), the folder is copied to a local one."""
    from functions.dispatch.job_spec import container
    from trainer.user_code import CHAMPION_DIR_ENV, stage_folder

    image = {"image_uri": SETTINGS.trainer_image.rsplit("/", 1)[0] + "/team-image:1"}
    request = parse_training_request(own(image, **SIZED))
    plan = plan_request(plan_input_from_request(request), now=NOW).plan
    assert plan is not None
    champion = {CHAMPION_DIR_ENV: "gs://landfall-artifacts/runs/r1/model/", "LANDFALL_CHAMPION_MODEL_VERSION": "m@1"}
    env = {e["name"]: e["value"] for e in container(request, plan, SETTINGS, "run-2", champion)["env"]}
    assert env[CHAMPION_DIR_ENV] == "/gcs/landfall-artifacts/runs/r1/model/"
    assert env["LANDFALL_CHAMPION_MODEL_VERSION"] == "m@1"
    local = tmp_path / "champion"
    assert stage_folder(str(tmp_path), local, str(tmp_path / "no-mount")) == str(tmp_path), "a local path as is"
    assert stage_folder(env[CHAMPION_DIR_ENV], local, str(tmp_path)) == f"{tmp_path}/landfall-artifacts/runs/r1/model/"
