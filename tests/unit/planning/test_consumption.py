"""How Google sells each machine (functions/planning/data/consumption.json), held over the whole catalog: no chosen
plan, fallback, or alternative offered as feasible uses a consumption mode Google does not sell that shape in; and the
decisions are the golden ones (tests/unit/golden/planner/consumption.json)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from functions.planning import PlanInput, PlannerConfig, plan_request
from functions.planning.catalog import build_catalog, load_catalog
from functions.planning.errors import CatalogError, PlanInputError
from functions.planning.reservations import parse_reservations
from schemas.vertex_jobs import load_vertex_jobs
from tests.unit.planning.consumption_golden import GOLDEN, NOW, cases, decide, mode

RESERVED = PlannerConfig(
    reservations=parse_reservations(
        json.dumps({"ultra": {"machine_type": "a3-ultragpu-8g", "zone": "us-central1-b", "count": 2}})
    ),
    project="acme-ml",
)


def _sold(machine_type: str, accelerator_type: str | None, how: str, region: str) -> bool:
    rule = load_catalog().consumption.rule(machine_type)
    if how == "flex_start" and not load_vertex_jobs().flex_start_offered(accelerator_type):
        return False
    return rule.sold(how, region)


def _plan_ok(plan: Any, inp: PlanInput) -> None:
    how = {"STANDARD": "on_demand", "SPOT": "spot", "FLEX_START": "flex_start", "reservation": "reservation"}[
        mode(plan)
    ]
    assert _sold(plan.machine_type, plan.accelerator_type, how, plan.region), (plan.machine_type, how, plan.region)
    assert how != "flex_start" or inp.flex_start == "allowed"
    assert how != "spot" or inp.spot != "never"


def _alternative_ok(row: Any, inp: PlanInput, config: PlannerConfig) -> None:
    """A feasible alternative names no scheduling strategy of its own: its shape must be sold as Spot, or without Spot
    in some way the request allows (on demand, Flex-start when allowed, a configured reservation)."""
    if row.spot:
        assert _sold(row.machine_type, row.accelerator_type, "spot", row.region), row
        return
    reserved = any(r.machine_type == row.machine_type and r.region == row.region for r in config.reservations)
    assert (
        _sold(row.machine_type, row.accelerator_type, "on_demand", row.region)
        or (inp.flex_start == "allowed" and _sold(row.machine_type, row.accelerator_type, "flex_start", row.region))
        or (reserved and _sold(row.machine_type, row.accelerator_type, "reservation", row.region))
    ), row


def test_the_whole_catalog_decides_as_the_golden_file_says() -> None:
    assert decide() == json.loads(GOLDEN.read_text()), (
        "planner decisions changed: run `python -m tests.unit.planning.consumption_golden` if deliberate"
    )


@pytest.mark.parametrize("config", [PlannerConfig(), RESERVED], ids=["no reservation", "a3-ultragpu-8g reserved"])
def test_no_plan_or_feasible_alternative_uses_a_mode_google_does_not_sell(config: PlannerConfig) -> None:
    planned = reserved = 0
    for _, inp in cases():
        outcome = plan_request(inp, config, now=NOW)
        for plan in (outcome.plan, *outcome.fallbacks):
            if plan is not None:
                planned += 1
                reserved += bool(plan.reservation)
                _plan_ok(plan, inp)
                for row in plan.alternatives:
                    if row.feasible:
                        _alternative_ok(row, inp, config)
        for candidate in outcome.candidates:
            if candidate.feasible:
                _alternative_ok(candidate, inp, config)
    assert planned > 300
    assert (reserved > 0) == bool(config.reservations)  # the reserved H200s are taken wherever the request allows


def test_shapes_sold_only_as_spot_or_flex_start_are_not_planned_on_demand() -> None:
    inp = PlanInput(
        task="causal-lm",
        preset="gpt-124m",
        dataset_bytes=10**8,
        batch_size=16,
        gpu_allowlist=("NVIDIA_H100_80GB",),
        max_gpus=1,
        spot="never",
    )
    outcome = plan_request(inp, now=NOW)
    assert outcome.plan is None and outcome.rejection is not None
    assert "a3-highgpu-1g is not sold on demand (Google: https://cloud.google.com/compute/docs/" in outcome.rejection
    assert "Spot or Flex-start only" in outcome.rejection
    assert "flex_start: allowed (wait for Flex-start capacity): 1x H100 80GB (a3-highgpu-1g" in outcome.rejection
    plan = plan_request(PlanInput(**{**vars(inp), "flex_start": "allowed"}), now=NOW).plan
    assert plan is not None and plan.machine_type == "a3-highgpu-1g" and plan.scheduling_strategy == "FLEX_START"
    assert any("Google does not sell a3-highgpu-1g on demand" in reason for reason in plan.reasons)
    outcome = plan_request(PlanInput(**{**vars(inp), "flex_start": "allowed"}), now=NOW)
    assert [row.bought for row in outcome.candidates if row.chosen] == ["flex-start"]  # `landfall plan`'s PRICING


def test_b200_without_spot_or_flex_start_is_a_rejected_alternative_that_says_why() -> None:
    inp = PlanInput(task="causal-lm", preset="gpt-1.3b", dataset_bytes=10**9, batch_size=64, spot="never")
    plan = plan_request(inp, PlannerConfig(max_alternatives=700), now=NOW).plan
    assert plan is not None and plan.machine_type != "a4-highgpu-8g"
    a4 = [row for row in plan.alternatives if row.machine_type == "a4-highgpu-8g"]
    assert a4 and not any(row.feasible for row in a4)
    assert all("a4-highgpu-8g is not sold on demand" in row.reason for row in a4)
    assert "Spot, Flex-start or a reservation only" in a4[0].reason


def test_a_rule_naming_an_unknown_source_or_machine_fails_with_the_entry() -> None:
    from functions.planning.catalog import CONSUMPTION_FILE, _read
    from schemas.gpus import read_gpus_json

    gpus, machines, prices, assumptions = (
        read_gpus_json(),
        _read("machines.json"),
        _read("prices.json"),
        _read("assumptions.json"),
    )
    raw = _read(CONSUMPTION_FILE)
    bad = copy.deepcopy(raw)
    bad["rules"]["a4-highgpu-8g"]["sources"] = ["a-blog"]
    with pytest.raises(CatalogError, match=r"rules\.a4-highgpu-8g\.sources: expected keys of sources"):
        build_catalog(gpus, machines, prices, assumptions, bad)
    bad = copy.deepcopy(raw)
    bad["rules"]["a9-hypergpu-8g"] = bad["rules"]["a4-highgpu-8g"]
    with pytest.raises(CatalogError, match="rules name no machine type or family of the catalog"):
        build_catalog(gpus, machines, prices, assumptions, bad)
    bad = copy.deepcopy(raw)
    del bad["rules"]["g2-standard"]["spot"]
    with pytest.raises(CatalogError, match=r"rules\.g2-standard: missing field 'spot'"):
        build_catalog(gpus, machines, prices, assumptions, bad)


def test_a_region_override_changes_the_mode_there_only() -> None:
    from functions.planning.catalog import CONSUMPTION_FILE, _read
    from schemas.gpus import read_gpus_json

    raw = _read(CONSUMPTION_FILE)
    raw["rules"]["g2-standard"]["regions"] = {"us-central1": {"on_demand": False}}
    catalog = build_catalog(
        read_gpus_json(), _read("machines.json"), _read("prices.json"), _read("assumptions.json"), raw
    )
    rule = catalog.consumption.rule("g2-standard-8")
    assert not rule.sold("on_demand", "us-central1") and rule.sold("on_demand", "us-east1")
    inp = PlanInput(
        task="causal-lm", preset="gpt-124m", dataset_bytes=10**8, gpu_allowlist=("NVIDIA_L4",), spot="never"
    )
    plan = plan_request(inp, PlannerConfig(catalog=catalog), now=NOW).plan
    assert plan is not None and plan.region != "us-central1" and not plan.spot


def test_an_unknown_named_reservation_is_bad_input() -> None:
    inp = PlanInput(task="causal-lm", preset="gpt-124m", dataset_bytes=10**8, reservation="nope")
    with pytest.raises(PlanInputError, match=r"constraints\.reservation 'nope' is not a reservation Landfall knows"):
        plan_request(inp, RESERVED, now=NOW)
