"""TrainingRequests built field by field from the schema, mostly the right shape but often meaningless (negative or
huge numbers, unknown presets, empty URIs, past deadlines, unicode), through the dispatcher with the real planner:
the run is REJECTED with a reason naming the field, or planned and submitted. Never a crash, never a retry.
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any

import pytest
from hypothesis import event, given

from functions.dispatch.handler import handle_training_request
from functions.dispatch.planner_config import planner_config
from functions.envelopes import PubSubMessage
from functions.planning import plan_input_from_request, plan_request
from schemas import json_text
from schemas.errors import SchemaError
from schemas.json_text import JsonTextError
from schemas.run_record import RunState
from schemas.training_request import TrainingRequest, parse_training_request
from tests.fakes import world
from tests.unit.fuzz import strategies as s
from tests.unit.fuzz.harness import assert_readable, firestore_storable

FIELDS = tuple(s.REQUEST_FIELDS)


@cache
def _config() -> Any:
    return planner_config(world.SETTINGS)


class PlannedWorld(world.World):
    """The dispatcher's world with the real planner (functions.planning) instead of a fixed answer."""

    def _plan(self, request: TrainingRequest) -> Any:
        self.planned.append(request.run_id)
        return plan_request(plan_input_from_request(request), _config(), now=self.clock.now)


def _field_error(raw: dict[str, Any]) -> str | None:
    """The field parse_training_request names for raw, or None when it parses."""
    try:
        parse_training_request(s.dumps(raw))
    except SchemaError as exc:
        return exc.field or ""
    return None


@given(s.training_requests)
def test_a_request_is_rejected_naming_its_field_or_planned(raw: dict[str, Any]) -> None:
    _dispatched_as_it_should_be(raw)


def _dispatched_as_it_should_be(raw: dict[str, Any]) -> None:
    """One delivery of raw: REJECTED naming the field, or planned and submitted (or waiting for capacity)."""
    w = PlannedWorld()
    data = s.dumps(raw)
    outcome = handle_training_request(PubSubMessage(data=data, message_id="m-1"), w.dispatch_deps)
    event(outcome)
    if outcome == "dropped:unreadable":  # not text (a lone surrogate): no field to name, nothing to store
        assert w.runs.docs == {}
        with pytest.raises(JsonTextError):
            json_text.loads(data)
        return
    ((run_id, doc),) = w.runs.docs.items()
    assert firestore_storable(doc), f"run {run_id} cannot be written to Firestore: {str(doc)[:500]}"
    run = w.run(run_id)
    if outcome.startswith("rejected:"):
        assert run.state == RunState.REJECTED and run.error is not None
        assert_readable(run.error.message, "rejection")
        if outcome == "rejected:invalid-request":
            bad = _field_error(raw)
            named = bad if bad is not None else ""
            assert named.split(".")[0] in run.error.message, (named, run.error.message)
            if bad is None:  # structurally valid: a rule names the field it broke
                assert any(f"{f}." in run.error.message or f"{f}:" in run.error.message for f in FIELDS), (
                    run.error.message
                )
    else:
        assert outcome in ("submitted", "waiting:no-capacity"), outcome
        assert run.state in (RunState.SUBMITTED, RunState.WAITING)
        assert run.plan is not None and _field_error(raw) is None
        deadline = parse_training_request(data).constraints.deadline
        if deadline:
            assert datetime.fromisoformat(deadline) > w.clock.now, "a past deadline was planned"


@given(s.schema_valid_requests)
def test_a_schema_valid_request_is_planned_or_rejected_naming_the_field(raw: dict[str, Any]) -> None:
    assert _field_error(raw) is None, "the strategy made a request the schema refuses"
    _dispatched_as_it_should_be(raw)
