"""What the dispatcher makes of pinned shapes, refusals of a job's spec, and its planning settings: a pin that names
no real shape is a REJECTED run naming the valid values with nothing planned or submitted; a disk or accelerator
refusal is not taken for capacity; quota overrides and the default region reach the planner it calls."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

import pytest
from google.api_core import exceptions as gexc

from functions import wiring
from functions.dispatch.planner_config import planner_config
from functions.gcp.vertex import CapacityError, translate_error
from functions.planning import PlanInput, PlanInputError, plan_request
from functions.planning.risk import NO_HISTORY
from functions.settings import SettingsError, settings_from_env
from schemas.run_record import RunState
from schemas.training_request import parse_training_request
from tests.fakes.world import REQUEST_JSON, World

BASE = {"GOOGLE_CLOUD_PROJECT": "landfall-local"}
NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)


def pinned(**constraints: object) -> bytes:
    request = json.loads(REQUEST_JSON)
    request["constraints"].update(constraints)
    return json.dumps(request).encode()


@pytest.mark.parametrize(
    ("constraints", "expected"),
    [
        (
            {"machine_type": "a3-highgpu-3g"},
            "constraints.machine_type: 'a3-highgpu-3g' is not a machine type Landfall plans for; did you mean ",
        ),
        (
            {"machine_type": "a3-highgpu-2g", "accelerator_count": 4},
            "constraints.accelerator_count: a3-highgpu-2g takes 2 x NVIDIA_H100_80GB, not 4; valid: 2",
        ),
        (
            {"machine_type": "n1-standard-8", "accelerator_count": 3},
            "constraints.accelerator_count: n1-standard-8 takes 1 or 2 or 4 or 8 x ",
        ),
        (
            {"accelerator_count": 3},
            "constraints.accelerator_count: no machine type takes 3 GPUs; valid: 1, 2, 4, 8, 16",
        ),
        (
            {"machine_type": "e2-standard-4", "replica_count": 2},
            "constraints.replica_count: e2-standard-4 trains on one machine",
        ),
        (
            {"machine_type": "a3-highgpu-8g", "replica_count": 65},
            "constraints.replica_count: 65 machines is more than Landfall plans for; valid: 1 to 64",
        ),
    ],
)
def test_a_pin_naming_no_real_shape_is_a_rejected_run_naming_the_valid_values(constraints: dict, expected: str) -> None:
    w = World()
    data = pinned(**constraints)
    assert w.deliver(data) == "rejected:invalid-request"
    run = w.run(parse_training_request(data).run_id)
    assert run.state == RunState.REJECTED and run.error is not None and run.error.code == "invalid-request"
    assert expected in run.error.message, run.error.message
    assert w.planned == [] and w.vertex.create_calls == [], "nothing is planned or submitted"


def test_the_planner_refuses_the_same_pins_and_names_a_shape_that_would_run_an_impossible_one() -> None:
    with pytest.raises(PlanInputError, match="valid: a3-highgpu-1g, a3-highgpu-2g, a3-highgpu-4g, a3-highgpu-8g"):
        plan_request(
            PlanInput(task="causal-lm", preset="gpt-124m", dataset_bytes=10**9, machine_type="a3-highgpu"), now=NOW
        )
    outcome = plan_request(
        PlanInput(
            task="causal-lm",
            preset="gpt-7b",
            dataset_bytes=10**9,
            batch_size=64,
            machine_type="a3-highgpu-1g",
            prefer="cheapest",
        ),
        now=NOW,
    )
    assert outcome.plan is None and outcome.rejection is not None
    assert (
        "pinned a3-highgpu-1g: 1x H100 80GB (a3-highgpu-1g) has 72.0 GB usable per GPU (80.0 GB less the 10% "
        "margin) of the 106.2 GB needed even under DDP at micro-batch 1"
    ) in outcome.rejection
    assert "feasible with a3-highgpu-2g instead of the pinned a3-highgpu-1g: 2x H100 80GB" in outcome.rejection


@pytest.mark.parametrize(
    "message",
    [
        'Boot disk type "pd-ssd" is not supported for machine type "a3-ultragpu-8g".',
        "List of found errors:\t1.Field: job_spec.worker_pool_specs[0].disk_spec.boot_disk_type; Message: Boot disk "
        'type "pd-ssd" is not supported for machine type "a4-highgpu-8g".\t',
        'Accelerator "NVIDIA_TESLA_T4" is not supported for machine type "e2-standard-8".',
    ],
)
def test_a_refused_spec_fails_the_run_instead_of_falling_back_as_if_it_were_capacity(message: str) -> None:
    assert not isinstance(translate_error(gexc.InvalidArgument(message), "create"), CapacityError)
    w = World()
    w.vertex.refuse("us-central1", gexc.InvalidArgument(message))
    assert w.deliver() == "failed:submit-refused"
    assert w.vertex.create_calls == ["us-central1"], "no fallback plan is tried for a wrong spec"
    run = w.run()
    assert run.state == RunState.FAILED and run.error is not None and "is not supported" in run.error.message


def test_a_machine_type_the_region_does_not_offer_is_still_capacity() -> None:
    refusal = gexc.InvalidArgument(
        "List of found errors:\t1.Field: job_spec.worker_pool_specs[0].machine_spec."
        'machine_type; Message: Machine type "a3-highgpu-8g" is not supported.\t'
    )
    assert isinstance(translate_error(refusal, "create"), CapacityError)


def test_quota_overrides_and_the_default_region_reach_the_dispatcher_s_planner(monkeypatch: pytest.MonkeyPatch) -> None:
    no_h100 = {
        r: {"gpus": {"NVIDIA_H100_80GB": {"on_demand": 0, "preemptible": 0}}}
        for r in ("us-central1", "us-east4", "us-west1", "asia-southeast1")
    }
    settings = settings_from_env(
        {
            **BASE,
            "LANDFALL_DEFAULT_REGION": "europe-west4",
            # job regions with H100 quota and without: the quota decides, not the deployment
            "LANDFALL_ARTIFACT_BUCKETS": "us-central1=a-us,us-east4=a-use4,europe-west4=a-eu",
            "LANDFALL_QUOTAS": json.dumps(no_h100),
            "LANDFALL_MEMORY_MARGIN": "0.2",
            "LANDFALL_TIMEOUT_MARGIN": "2",
        }
    )
    monkeypatch.setattr(wiring, "get_settings", lambda: settings)
    monkeypatch.setattr(wiring, "_measured", lambda request: [])  # no measurements: Firestore is not reached here
    monkeypatch.setattr(wiring, "_capacity_history", lambda: NO_HISTORY)  # nor for capacity
    wiring.dispatcher_planner_config.cache_clear()
    try:
        config = wiring.dispatcher_planner_config()
        assert config.default_region == "europe-west4"
        assert (config.memory_margin, config.timeout_margin) == (0.2, 2.0)
        assert config.quotas.gpu_limit("us-central1", "NVIDIA_H100_80GB", False) == 0
        request = json.loads(REQUEST_JSON)
        request.update(task="causal-lm", model={"preset": "gpt-124m", "label_column": "label"})
        request["constraints"].update(gpu_allowlist=["NVIDIA_H100_80GB"], spot="never")
        plan = wiring._plan(parse_training_request(json.dumps(request))).plan
        assert plan is not None and plan.region == "europe-west4", "the only region left with H100 quota"
        assert plan.memory.usable_bytes == 64 * 10**9  # 80 GB less 20 %
        assert "x 2" in next(r for r in plan.reasons if r.startswith("scheduling:"))
    finally:
        wiring.dispatcher_planner_config.cache_clear()
    outcome = plan_request(
        PlanInput(task="tabular-classification", preset="mlp-small", dataset_bytes=48_213),
        planner_config(settings_from_env({**BASE, "LANDFALL_DEFAULT_REGION": "europe-west4"})),
        now=NOW,
    )
    assert outcome.evaluation.space.regions[0] == "europe-west4", "equal prices resolve to the default region"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LANDFALL_QUOTAS": "{not json"}, "LANDFALL_QUOTAS is not JSON"),
        ({"LANDFALL_QUOTAS": "[1, 2]"}, "LANDFALL_QUOTAS must be a JSON object of regions"),
        ({"LANDFALL_QUOTAS": "{}", "LANDFALL_QUOTAS_FILE": "/q.json"}, "not both"),
        (
            {"LANDFALL_QUOTAS_FILE": "/nonexistent/quotas.json"},
            "LANDFALL_QUOTAS_FILE='/nonexistent/quotas.json' cannot",
        ),
        ({"LANDFALL_MEMORY_MARGIN": "1"}, "LANDFALL_MEMORY_MARGIN must be a number from 0, below 1, got '1'"),
        ({"LANDFALL_TIMEOUT_MARGIN": "0.5"}, "LANDFALL_TIMEOUT_MARGIN must be a number from 1"),
    ],
)
def test_bad_planning_settings_fail_by_name(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message.replace("(", r"\(")):
        settings_from_env({**BASE, **env})


def test_a_quota_file_is_read_once_into_the_settings(tmp_path) -> None:
    path = tmp_path / "quotas.json"
    path.write_text('{"us-central1": {"cpus": 96}}')
    settings = settings_from_env({**BASE, "LANDFALL_QUOTAS_FILE": str(path)})
    assert json.loads(settings.quota_overrides) == {"us-central1": {"cpus": 96}}
    quotas = planner_config(settings).quotas
    assert quotas is not None and quotas.cpu_limit("us-central1") == 96
    assert dataclasses.replace(settings, quota_overrides="").quota_overrides == ""
