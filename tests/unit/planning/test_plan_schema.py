"""The Plan record: golden examples, round trips, Firestore-safe dicts and errors that name the field."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from schemas.errors import SchemaError
from schemas.plan import Plan, parse_plan
from tests.unit.planning.golden import EXAMPLES, REQUESTS, planned

JSON_TYPES = (dict, list, str, int, float, bool, type(None))


def _json_only(node, path="plan"):
    assert isinstance(node, JSON_TYPES), f"{path} is a {type(node).__name__}"
    if isinstance(node, dict):
        for key, value in node.items():
            assert isinstance(key, str)
            _json_only(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _json_only(value, f"{path}[{i}]")


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_golden_examples_round_trip_and_match_the_planner(name):
    golden = json.loads((EXAMPLES / name).read_text())
    plan = parse_plan(golden)
    assert plan.to_dict() == golden
    assert Plan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    assert planned(name) == golden, "planner output changed: run `python -m tests.unit.planning.golden` if deliberate"
    _json_only(plan.to_dict())


def test_cpu_only_plan_has_null_accelerator():
    plan = parse_plan(json.loads((EXAMPLES / "plan_cpu.json").read_text()))
    assert plan.accelerator_type is None and plan.accelerator_count == 0 and plan.gpu_count == 0
    assert plan.reduction_server_machine_type is None and plan.reduction_server_replicas == 0


BAD = [
    (lambda d: d.pop("strategy"), "plan.strategy", "is required"),
    (lambda d: d.update(strategy="zero3"), "plan.strategy", "'zero3' is not one of"),
    (lambda d: d.update(precision="int8"), "plan.precision", "is not one of"),
    (lambda d: d.update(replica_count=0), "plan.replica_count", "must be >= 1"),
    (lambda d: d.update(accelerator_count=0), "plan.accelerator_count", "must be 0 exactly when"),
    (lambda d: d["memory"].update(total_bytes="lots"), "plan.memory.total_bytes", "expected an integer"),
    (lambda d: d.update(reduction_server_replicas=3), "plan.reduction_server_machine_type", "Reduction Server"),
    (lambda d: d["alternatives"][1].update(spot="yes"), "plan.alternatives[1].spot", "expected true or false"),
    (lambda d: d.update(schema_version=2), "plan.schema_version", "not supported"),
    (lambda d: d.update(machine="x"), "plan.machine", "unknown field"),
    (lambda d: d.update(estimated_cost_usd=-1), "plan.estimated_cost_usd", "must be >= 0"),
]


@pytest.mark.parametrize(("mutate", "field", "message"), BAD)
def test_bad_plans_name_the_field(mutate, field, message):
    data = copy.deepcopy(json.loads((EXAMPLES / "plan.json").read_text()))
    mutate(data)
    with pytest.raises(SchemaError, match=message) as err:
        parse_plan(data)
    assert err.value.field == field


def test_not_an_object():
    with pytest.raises(SchemaError, match="expected a JSON object"):
        parse_plan([1, 2])


def test_the_mode_reads_from_the_stored_flags_of_old_records():
    golden = json.loads((EXAMPLES / "plan_cpu.json").read_text())
    old = {k: v for k, v in golden.items() if k != "flex_start"}  # written before Flex-start existed
    assert parse_plan(old).mode == "on_demand" and not parse_plan(old).spot
    spot = parse_plan({**old, "spot": True})
    assert (spot.mode, spot.spot, spot.flex_start, spot.scheduling_strategy) == ("spot", True, False, "SPOT")
    flex = parse_plan({**golden, "flex_start": True, "max_wait_seconds": 3600})
    assert (flex.mode, flex.spot, flex.flex_start) == ("flex_start", False, True)
    assert flex.scheduling_strategy == "FLEX_START"
    assert "mode" not in flex.to_dict() and flex.to_dict()["flex_start"] is True  # written as it always was


def test_a_plan_names_its_reservation_exactly_when_its_mode_is_reservation():
    plan = parse_plan(json.loads((EXAMPLES / "plan_cpu.json").read_text()))
    with pytest.raises(SchemaError, match=r"plan\.reservation"):
        dataclasses.replace(plan, mode="reservation")
    with pytest.raises(SchemaError, match=r"plan\.mode"):
        dataclasses.replace(plan, mode="calendar")
