"""PlanInput from a TrainingRequest (object or dict), and the parsing of counts and deadlines."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from functions.planning import PlanInputError, parse_count, plan_input_from_request
from functions.planning.inputs import parse_deadline
from schemas.training_request import parse_training_request

EXAMPLE = Path(__file__).parents[3] / "schemas/examples/training_request.json"


def test_reads_a_training_request_and_its_dict_alike():
    data = json.loads(EXAMPLE.read_text())
    data["constraints"].update(
        deadline="2026-12-01T06:00:00+01:00",
        budget_usd=12.5,
        regions=["europe-west4"],
        gpu_allowlist=["NVIDIA_L4"],
        max_gpus=4,
        spot="never",
    )
    from_object = plan_input_from_request(parse_training_request(json.dumps(data)))
    from_dict = plan_input_from_request(data)
    assert from_object == from_dict
    assert (from_object.task, from_object.preset) == ("tabular-classification", "mlp-small")
    assert (from_object.dataset_bytes, from_object.dataset_objects) == (48_213, 4)
    assert (from_object.epochs, from_object.batch_size, from_object.max_steps) == (5, 64, 0)
    assert from_object.deadline == datetime(2026, 12, 1, 5, tzinfo=UTC)
    assert (from_object.budget_usd, from_object.regions, from_object.gpu_allowlist) == (
        12.5,
        ("europe-west4",),
        ("NVIDIA_L4",),
    )
    assert (from_object.max_gpus, from_object.spot, from_object.checkpointing) == (4, "never", True)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("124M", 124_000_000),
        ("1.3B", 1_300_000_000),
        ("7b", 7_000_000_000),
        ("7e9", 7_000_000_000),
        ("70000000000", 70_000_000_000),
        (" 2k ", 2000),
        (1.5e9, 1_500_000_000),
    ],
)
def test_counts(text, value):
    assert parse_count(text) == value


@pytest.mark.parametrize("text", ["", "seven", "1.3X", "-5", "0"])
def test_bad_counts(text):
    with pytest.raises(PlanInputError):
        parse_count(text)


def test_deadlines():
    assert parse_deadline("") is None
    assert parse_deadline("2026-12-01T00:00:00Z") == datetime(2026, 12, 1, tzinfo=UTC)
    with pytest.raises(PlanInputError, match="has no timezone"):
        parse_deadline("2026-12-01T00:00:00")
    with pytest.raises(PlanInputError, match="is not RFC 3339"):
        parse_deadline("tomorrow")
