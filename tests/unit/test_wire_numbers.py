"""Numbers the wire cannot carry. NaN, Infinity and integers beyond 64 bits are refused by the schema
parser with the field named (in a request and in a landfall.json), and a refusal by the requests topic at publish
time is recorded on the dataset as REFUSED with its reason instead of being retried forever."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from google.api_core.exceptions import InvalidArgument
from google.protobuf import json_format

from deploy.routes import Route
from schemas.dataset_record import DatasetStatus, VersionStatus
from schemas.errors import SchemaError
from schemas.proto import message_class
from schemas.training_request import parse_training_request
from tests.fakes.ingest import World

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # a protobuf int64: every integer field of schemas/training_request.proto
EXAMPLE = (Path(__file__).resolve().parents[2] / "schemas" / "examples" / "training_request.json").read_text()


def with_value(section: str, key: str, literal: str) -> str:
    """The golden request's JSON text with one value replaced by a JSON literal as written (NaN, 1e999, ...)."""
    data = json.loads(EXAMPLE)
    data[section][key] = "@@"
    return json.dumps(data).replace('"@@"', literal)


@pytest.mark.parametrize(
    ("section", "key", "literal", "message"),
    [
        ("hyperparameters", "learning_rate", "NaN", "must be a finite number"),
        ("hyperparameters", "learning_rate", "Infinity", "must be a finite number"),
        ("hyperparameters", "learning_rate", "1e999", "must be a finite number"),
        ("hyperparameters", "learning_rate", "1" + "0" * 400, "got an integer of 401 digits"),
        ("constraints", "budget_usd", "-Infinity", "must be a finite number"),
        ("hyperparameters", "epochs", str(INT64_MAX + 1), f"must fit in a signed 64-bit integer ({INT64_MIN} to"),
        ("hyperparameters", "seed", "1" + "0" * 40, "must fit in a signed 64-bit integer"),
        ("hyperparameters", "max_steps", str(INT64_MAX + 1), "must fit in a signed 64-bit integer"),
        ("constraints", "max_gpus", str(2**64), "must fit in a signed 64-bit integer"),
        ("dataset", "total_bytes", str(2**63), "must fit in a signed 64-bit integer"),
    ],
)
def test_numbers_the_wire_cannot_carry_are_refused_naming_the_field(
    section: str, key: str, literal: str, message: str
) -> None:
    with pytest.raises(SchemaError, match=message.replace("(", r"\(")) as caught:
        parse_training_request(with_value(section, key, literal))
    assert caught.value.field == f"{section}.{key}"


def test_an_integer_too_long_for_python_to_read_is_not_json_rather_than_a_crash() -> None:
    with pytest.raises(SchemaError, match="message is not JSON"):
        parse_training_request(with_value("hyperparameters", "epochs", "9" * 5000))


def test_the_edges_of_the_wire_pass_and_the_topic_schema_takes_them() -> None:
    message = message_class()
    request = parse_training_request(with_value("hyperparameters", "seed", str(INT64_MAX)))
    assert request.hyperparameters.seed == INT64_MAX
    json_format.Parse(request.to_json(), message())
    big = parse_training_request(with_value("hyperparameters", "learning_rate", str(2**70)))
    assert big.hyperparameters.learning_rate == float(2**70)
    json_format.Parse(big.to_json(), message())


ROUTE = Route(
    name="marked",
    bucket="*",
    prefix="datasets/",
    task="tabular-classification",
    model_preset="mlp-small",
    overridable=("hyperparameters.*", "constraints.*"),
)


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        (b'{"hyperparameters": {"learning_rate": NaN}}', "hyperparameters.learning_rate: must be a finite number"),
        (b'{"constraints": {"budget_usd": Infinity}}', "constraints.budget_usd: must be a finite number"),
        (
            b'{"hyperparameters": {"epochs": 18446744073709551616}}',
            "hyperparameters.epochs: must fit in a signed 64-bit integer",
        ),
        (b'{"hyperparameters": {"seed": ' + b"7" * 5000 + b"}}", "landfall.json is not JSON"),
    ],
    ids=["nan", "infinity", "2**64", "5000-digits"],
)
def test_landfall_json_with_such_a_number_refuses_the_dataset_with_the_field(overrides: bytes, reason: str) -> None:
    w = World((ROUTE,))
    w.upload("datasets/n/part-0.csv")
    w.upload("datasets/n/landfall.json", overrides)
    assert w.upload("datasets/n/_SUCCESS", b"").startswith("refused:")
    assert w.published == []
    doc = w.dataset("datasets/n/")
    assert doc["status"] == DatasetStatus.REFUSED
    assert reason in doc["reason"]


def test_a_refusal_by_the_topic_at_publish_is_recorded_as_refused_not_retried() -> None:
    w = World((ROUTE,))

    def refusing(data: bytes) -> str:
        raise InvalidArgument("Invalid data in message: Message failed schema validation")

    w.deps = replace(w.deps, publish=refusing)
    w.upload("datasets/r/part-0.csv")
    outcome = w.upload("datasets/r/_SUCCESS", b"")  # on main: InvalidArgument escapes, and Pub/Sub redelivers
    assert outcome.startswith("refused:")
    doc = w.dataset("datasets/r/")
    assert doc["status"] == DatasetStatus.REFUSED
    assert "the requests topic refused the TrainingRequest" in doc["reason"]
    assert "failed schema validation" in doc["reason"]
    version = w.datasets.versions[doc["version"]["run_id"]]
    assert version["status"] == VersionStatus.REFUSED and version["reason"] == doc["reason"]
    # A redelivery of the same marker is settled: no retry loop.
    assert w.deliver("datasets/r/_SUCCESS", doc["version"]["generation"]) == "duplicate:REFUSED"
