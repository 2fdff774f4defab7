"""Every consumption (sale) mode of the vocabulary is handled by every place that must handle one.

A mode is added as a term in schemas/vocabulary.py (CONSUMPTION_MODE_TERMS) and, where it has a price of its own,
a column in functions/planning/data/prices.json; consumption.json says where Google sells it. Each test below is one
place, parametrized over the modes, and its failure names the place and the mode that it does not handle yet:

  1. the Vertex API: its scheduling strategy is a value of Scheduling.Strategy;
  2. the price data: prices.json prices every item in its price column (or the column's factor);
  3. the sales data: every rule of consumption.json says whether the mode is sold;
  4. the catalog's words: SalesRule.describe() names it by its title;
  5. the planner's search: some request yields a plan in the mode (MODE_REQUESTS below);
  6. the explanations: the chosen candidate's PRICING tag and the plan's `scheduling:` reason;
  7. the plan record: Plan.to_dict / parse_plan read the mode back, in the stored form older readers know;
  8. the CustomJob: job_spec sets its scheduling strategy, its wait and its reservation affinity;
  9. the Vertex emulator: it accepts the job, and treats its quota and preemption as the mode says;
 10. the waits the reconciler explains: a mode that waits for capacity says so.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from functools import cache

import pytest
from google.cloud.aiplatform_v1.types import CustomJob, Scheduling

from deploy.vertex_emulator.faults import is_preemptible, mode_of
from deploy.vertex_emulator.validation import validate_custom_job
from functions.dispatch.job_spec import custom_job
from functions.planning import PlanInput, PlannerConfig, PlanOutcome, plan_request
from functions.planning.catalog import MODES, SalesRule, _read, load_catalog
from functions.planning.reservations import parse_reservations
from functions.records.long_waits import wait_reason
from functions.settings import settings_from_env
from schemas.plan import Plan, parse_plan
from schemas.training_request import parse_training_request
from schemas.vocabulary import CONSUMPTION_MODE_TERMS, ConsumptionMode
from tests.unit.custom_job_golden import request_path

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
RESERVED = {"h100s": {"machine_type": "a3-highgpu-8g", "zone": "us-central1-a", "count": 2}}
PLANNERS = {
    "default": PlannerConfig(),
    "reserved": PlannerConfig(reservations=parse_reservations(json.dumps(RESERVED)), project="acme-ml"),
}
LM = PlanInput(task="causal-lm", preset="gpt-1.3b", dataset_bytes=10**10, batch_size=64)
MODE_REQUESTS: dict[str, tuple[PlanInput, str]] = {
    "on_demand": (dataclasses.replace(LM, spot="never"), "default"),
    "spot": (dataclasses.replace(LM, spot="required"), "default"),
    "flex_start": (
        PlanInput(
            task="causal-lm",
            preset="gpt-124m",
            dataset_bytes=10**8,
            batch_size=64,
            gpu_allowlist=("NVIDIA_H100_80GB",),
            max_gpus=1,
            spot="never",
            regions=("us-central1",),
            flex_start="allowed",  # a3-highgpu-1g is sold as Spot or Flex-start only (consumption.json)
        ),
        "default",
    ),
    "reservation": (dataclasses.replace(LM, reservation="h100s"), "reserved"),
}
"""A request (and planner configuration) whose plan the search should make in each mode."""
SETTINGS = settings_from_env({"GOOGLE_CLOUD_PROJECT": "acme-ml"})
MODES_BY_NAME = pytest.mark.parametrize("mode", CONSUMPTION_MODE_TERMS, ids=lambda m: m.name)


@cache
def _outcome(name: str) -> PlanOutcome:
    inp, planner = MODE_REQUESTS[name]
    return plan_request(inp, PLANNERS[planner], now=NOW)


def _plan(mode: ConsumptionMode) -> Plan:
    if mode.name not in MODE_REQUESTS:
        pytest.fail(f"the planner's search: no request in MODE_REQUESTS for mode {mode.name}; add one it should plan")
    plan = _outcome(mode.name).plan
    assert plan is not None and plan.mode == mode.name, (
        f"the planner's search (functions/planning/space.py AXIS_MODES and region_view, job_choices.job_choices) "
        f"does not yield mode {mode.name}: got {plan.mode if plan else 'no plan'}"
    )
    return plan


@MODES_BY_NAME
def test_vertex_takes_its_scheduling_strategy(mode: ConsumptionMode) -> None:
    assert mode.scheduling_strategy in Scheduling.Strategy.__members__, (
        f"schemas/vocabulary.py: mode {mode.name}'s scheduling strategy {mode.scheduling_strategy} is not a value "
        f"of Vertex's Scheduling.Strategy ({', '.join(Scheduling.Strategy.__members__)})"
    )


@MODES_BY_NAME
def test_the_price_data_prices_it(mode: ConsumptionMode) -> None:
    if not mode.price:
        return  # no machine cost: paid for already
    book = load_catalog().prices
    for name in book.items:
        for region in book.region_multipliers:
            try:
                quote = book.price(name, region, mode.price)
            except KeyError as exc:
                pytest.fail(
                    f"functions/planning/data/prices.json: no {mode.price}_usd_per_hour for {name} and no "
                    f"{mode.price}_factor to derive it ({exc!r})"
                )
            assert quote.usd_per_hour >= 0


@MODES_BY_NAME
def test_the_sales_data_says_where_it_is_sold(mode: ConsumptionMode) -> None:
    raw = _read("consumption.json")
    rules = {"default": raw["default"], **raw["rules"]}
    missing = [name for name, rule in rules.items() if mode.name not in rule]
    assert not missing, f"functions/planning/data/consumption.json: rules {missing} say nothing of {mode.name}"
    assert mode.name in MODES


@MODES_BY_NAME
def test_the_catalog_names_it(mode: ConsumptionMode) -> None:
    rule = SalesRule(modes=frozenset(MODES), sources=("x",), note="", region_modes={})
    assert mode.label in rule.describe(), f"functions/planning/catalog.py SalesRule.describe() leaves out {mode.name}"
    assert mode.sold_as and mode.tag, f"schemas/vocabulary.py: mode {mode.name} needs sold_as and tag for its words"


@MODES_BY_NAME
def test_the_search_yields_it_and_explains_it(mode: ConsumptionMode) -> None:
    plan = _plan(mode)
    rows = [row for row in _outcome(mode.name).candidates if row.chosen]
    assert [row.bought for row in rows] == [mode.tag], (
        f"functions/planning/explain.py _bought: the chosen candidate in mode {mode.name} is tagged "
        f"{[row.bought for row in rows]}, not {mode.tag}"
    )
    assert any(reason.startswith(f"scheduling: {mode.scheduling_strategy}") for reason in plan.reasons), (
        f"functions/planning/job_choices.py: the plan's reasons do not say scheduling: {mode.scheduling_strategy}"
    )
    assert plan.spot == (mode.name == "spot") and plan.flex_start == (mode.name == "flex_start")


@MODES_BY_NAME
def test_the_plan_record_reads_it_back_in_the_stored_form(mode: ConsumptionMode) -> None:
    plan = _plan(mode)
    stored = plan.to_dict()
    assert "mode" not in stored and stored["spot"] == plan.spot and stored["flex_start"] == plan.flex_start
    assert parse_plan(json.loads(json.dumps(stored))).mode == mode.name, (
        f"schemas/plan.py: a stored plan in mode {mode.name} reads back as another mode"
    )


def _job(plan: Plan) -> dict:
    request = parse_training_request(request_path("spot").read_text())
    return custom_job(request, plan, SETTINGS, "run-abc")


@MODES_BY_NAME
def test_the_custom_job_carries_it(mode: ConsumptionMode) -> None:
    plan = _plan(mode)
    job = _job(plan)
    scheduling = job["job_spec"]["scheduling"]
    where = f"functions/dispatch/job_spec.py, mode {mode.name}"
    assert scheduling["strategy"] == mode.scheduling_strategy, f"{where}: strategy {scheduling['strategy']}"
    assert ("max_wait_duration" in scheduling) == mode.waits, f"{where}: max_wait_duration"
    pools = job["job_spec"]["worker_pool_specs"]
    affinity = ["reservation_affinity" in pool["machine_spec"] for pool in pools[:2] if pool]
    assert affinity and all(a == mode.reserved for a in affinity), f"{where}: reservation_affinity"


@MODES_BY_NAME
def test_the_emulator_accepts_it(mode: ConsumptionMode) -> None:
    job = CustomJob(_job(_plan(mode)))
    errors = validate_custom_job(job)
    assert not errors, f"deploy/vertex_emulator/validation.py refuses mode {mode.name}: {errors}"
    emulated = mode_of(job.job_spec)
    assert emulated.scheduling_strategy == mode.scheduling_strategy, "deploy/vertex_emulator/faults.py mode_of"
    assert is_preemptible(job.job_spec) == mode.preemptible_quota, "deploy/vertex_emulator/faults.py is_preemptible"
    assert emulated.preemptible == mode.preemptible, "deploy/vertex_emulator/runner.py: Spot preemptions"


@MODES_BY_NAME
def test_the_reconciler_says_why_it_waits(mode: ConsumptionMode) -> None:
    plan = _plan(mode)
    text = wait_reason("JOB_STATE_PENDING", plan, plan.region)
    assert ("max_wait_duration" in text) == mode.waits, f"functions/records/long_waits.py: mode {mode.name}: {text}"
