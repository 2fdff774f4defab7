"""Reservations: declared in the settings (LANDFALL_RESERVATIONS), named by a request (constraints.reservation),
counted as already paid for, preferred, explained, and refused with a reason where the request cannot use them."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

import pytest

from functions.dispatch.job_spec import custom_job
from functions.dispatch.planner_config import planner_config
from functions.dispatch.request_rules import request_problems
from functions.planning import PlanInput, PlannerConfig, plan_request
from functions.planning.errors import PlanInputError
from functions.planning.reservations import parse_reservations
from functions.settings import SettingsError, settings_from_env
from schemas.errors import SchemaError
from schemas.plan import Plan, parse_plan
from schemas.training_request import parse_training_request
from tests.unit.custom_job_golden import ENV, request_path

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
H100S = {"h100s": {"machine_type": "a3-highgpu-8g", "zone": "us-central1-a", "count": 2}}
CONFIG = PlannerConfig(reservations=parse_reservations(json.dumps(H100S)), project="acme-ml")
LM = PlanInput(task="causal-lm", preset="gpt-1.3b", dataset_bytes=10**10, batch_size=64)


def chosen(inp: PlanInput, config: PlannerConfig = CONFIG) -> Plan:
    plan = plan_request(inp, config, now=NOW).plan
    assert plan is not None
    return plan


def test_a_declared_reservation_is_preferred_counted_as_paid_for_and_explained() -> None:
    without = chosen(LM, PlannerConfig())
    plan = chosen(LM)
    assert without.machine_type != "a3-highgpu-8g" or without.spot  # it would not be chosen on its own
    assert (plan.machine_type, plan.region, plan.spot, plan.flex_start) == (
        "a3-highgpu-8g",
        "us-central1",
        False,
        False,
    )
    assert plan.replica_count <= 2
    assert plan.reservation == "projects/acme-ml/zones/us-central1-a/reservations/h100s"
    machines = 0.0 if not plan.reduction_server_replicas else plan.hourly_cost_usd
    assert plan.hourly_cost_usd == machines  # only a Reduction Server pool (not reserved) would cost anything
    assert any(
        "reservation h100s (2 x a3-highgpu-8g in us-central1-a)" in reason and "already paid for" in reason
        for reason in plan.reasons
    )
    assert "scheduling: STANDARD on a reservation" in " ".join(plan.reasons)
    rows = plan_request(LM, CONFIG, now=NOW).candidates
    assert [row.bought for row in rows if row.chosen] == ["reserved"]
    assert parse_plan(plan.to_dict()) == plan


def test_a_plan_never_takes_more_machines_than_the_reservation_holds() -> None:
    pinned = dataclasses.replace(LM, machine_type="a3-highgpu-8g", replica_count=4, reservation="h100s")
    outcome = plan_request(pinned, CONFIG, now=NOW)
    assert outcome.plan is None and outcome.rejection is not None
    assert "the request names reservation h100s (2 x a3-highgpu-8g in us-central1-a)" in outcome.rejection
    assert "needs 4 machines; the named reservation h100s" in outcome.rejection and "holds 2" in outcome.rejection


def test_a_named_reservation_the_request_cannot_use_is_rejected_with_the_reason() -> None:
    outcome = plan_request(dataclasses.replace(LM, reservation="h100s", gpu_allowlist=("NVIDIA_L4",)), CONFIG, now=NOW)
    assert outcome.plan is None and outcome.rejection is not None
    assert "not on the named reservation h100s" in outcome.rejection
    assert "allowing NVIDIA_H100_80GB" in outcome.rejection  # the change that would make it feasible


def test_a_named_reservation_is_the_plan_even_where_spot_is_cheaper() -> None:
    plan = chosen(dataclasses.replace(LM, reservation="h100s"))
    assert plan.reservation.endswith("/reservations/h100s") and not plan.spot


def test_reservations_google_does_not_sell_or_that_are_unknown_are_bad_input() -> None:
    single = PlannerConfig(
        reservations=parse_reservations(
            json.dumps({"one": {"machine_type": "a3-highgpu-1g", "zone": "us-central1-a", "count": 1}})
        ),
        project="acme-ml",
    )
    with pytest.raises(PlanInputError, match="Google does not sell a3-highgpu-1g through reservations"):
        plan_request(dataclasses.replace(LM, reservation="one"), single, now=NOW)
    with pytest.raises(PlanInputError, match=r"not a reservation Landfall knows \(known: h100s\)"):
        plan_request(dataclasses.replace(LM, reservation="h200s"), CONFIG, now=NOW)
    nowhere = PlannerConfig(
        reservations=parse_reservations(
            json.dumps({"far": {"machine_type": "a3-highgpu-8g", "zone": "us-east1-b", "count": 1}})
        ),
        project="acme-ml",
    )
    with pytest.raises(PlanInputError, match=r"Vertex offers a3-highgpu-8g in .*, not us-east1"):
        plan_request(dataclasses.replace(LM, reservation="far"), nowhere, now=NOW)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1]", "must be a JSON object of name -> reservation"),
        ('{"r": {"machine_type": "a3-highgpu-8g", "zone": "us-central1-a", "count": 0}}', r"r\.count: expected"),
        ('{"r": {"machine_type": "a3-highgpu-8g", "zone": "central", "count": 1}}', r"r\.zone: expected a zone"),
        ('{"r": {"machine_type": "a3-highgpu-8g", "zone": "us-central1-a", "count": 1, "size": 2}}', "unknown fields"),
    ],
)
def test_malformed_reservations_say_what_was_expected(text: str, message: str) -> None:
    with pytest.raises(PlanInputError, match=message):
        parse_reservations(text)


def test_the_setting_is_read_checked_and_reaches_the_planner_and_the_job() -> None:
    with pytest.raises(SettingsError, match="LANDFALL_RESERVATIONS is not JSON"):
        settings_from_env({**ENV, "LANDFALL_RESERVATIONS": "h100s"})
    bad = settings_from_env({**ENV, "LANDFALL_RESERVATIONS": '{"r": {"machine_type": "a3-highgpu-8g"}}'})
    with pytest.raises(SettingsError, match=r"LANDFALL_RESERVATIONS\.r\.zone: expected a zone"):
        planner_config(bad)
    settings = settings_from_env({**ENV, "LANDFALL_RESERVATIONS": json.dumps(H100S)})
    config = planner_config(settings)
    assert config.reservations == CONFIG.reservations and config.project == "acme-ml"
    request = parse_training_request(request_path("spot").read_text())
    request = dataclasses.replace(
        request,
        model=dataclasses.replace(request.model, preset="gpt-1.3b"),
        constraints=dataclasses.replace(request.constraints, gpu_allowlist=(), spot="allowed", reservation="h100s"),
    )
    assert request_problems(request, settings, NOW) == []
    from functions.planning import plan_input_from_request

    plan = plan_request(plan_input_from_request(request), config, now=NOW).plan
    assert plan is not None and plan.reservation
    job = custom_job(request, plan, settings, request.run_id)
    for pool in job["job_spec"]["worker_pool_specs"][: min(2, plan.replica_count)]:
        assert pool["machine_spec"]["reservation_affinity"]["values"] == [plan.reservation]
    unknown = dataclasses.replace(request, constraints=dataclasses.replace(request.constraints, reservation="h200s"))
    assert any("not a reservation Landfall knows" in p for p in request_problems(unknown, settings, NOW))


def test_a_plan_on_a_reservation_is_neither_spot_nor_flex_start() -> None:
    data = chosen(LM).to_dict()
    with pytest.raises(SchemaError, match="neither Spot nor FLEX_START"):
        parse_plan({**data, "spot": True})
    with pytest.raises(SchemaError, match="projects/PROJECT/zones/ZONE/reservations/NAME"):
        parse_plan({**data, "reservation": "h100s"})
    assert "reservation" not in chosen(LM, PlannerConfig()).to_dict()  # written only when set


def test_a_declared_reservation_no_plan_can_use_is_passed_over_for_the_next() -> None:
    declared = {
        "small": {"machine_type": "a3-highgpu-1g", "zone": "us-central1-a", "count": 4},  # not sold reserved
        **H100S,
    }
    config = PlannerConfig(reservations=parse_reservations(json.dumps(declared)), project="acme-ml")
    plan = chosen(LM, config)
    assert plan.reservation.endswith("/reservations/h100s")
